"""torch_quiver_ops._device: sizes, cliques and device resolution."""
import re

import pytest
import torch

from conftest import HAS_CUDA
from torch_quiver_ops._device import is_int, p2p_cliques, parse_size, resolve_device


def test_parse_size():
    assert parse_size(1000) == 1000
    assert parse_size("200M") == 200 * 2**20
    assert parse_size("0.5G") == 2**29
    assert parse_size("1.5GB") == int(1.5 * 2**30)
    with pytest.raises(ValueError, match="cannot read"):
        parse_size("lots")
    with pytest.raises(ValueError, match=">= 0"):
        parse_size(-1)
    with pytest.raises(ValueError, match="less than one byte: .* '50%'"):
        parse_size("0.5")  # as parse_size(0.5): a share is written as a percentage
    with pytest.raises(ValueError, match="cache_size must be a whole number of bytes, got 2.5"):
        parse_size(2.5, "cache_size")  # (had been 2 bytes)
    assert parse_size(2.5e9) == 2_500_000_000 and parse_size("2.5K") == 2560
    with pytest.raises(ValueError, match="cache_size must be a whole number of bytes, got '2.5'"):
        parse_size("2.5", "cache_size")
    with pytest.raises(ValueError, match=r"cannot read topology_cache='lots' as a size"):
        parse_size("lots", "topology_cache")
    assert parse_size(10**400) == 10**400  # every row (math.isfinite raised OverflowError)


def test_is_int_refuses_bools_and_floats():
    assert is_int(0) and is_int(-3) and is_int(2**70)
    assert not any(map(is_int, [True, False, 1.0, "1", None, torch.tensor(1)]))


def test_p2p_cliques_follow_peer_access(monkeypatch):
    links = {(0, 1), (1, 0), (2, 3), (3, 2), (0, 2), (2, 0)}
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: (a, b) in links)
    assert p2p_cliques([0, 1, 2, 3]) == [[0, 1], [2, 3]]
    assert p2p_cliques([0, 2, 1]) == [[0, 2], [1]]
    assert p2p_cliques([]) == []
    # Access one way only is no clique: each GPU reads the other's memory (the links above,
    # both ways, passed with either direction unchecked).
    for one_way in ({(0, 1)}, {(1, 0)}):
        monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: (a, b) in one_way)
        assert p2p_cliques([0, 1]) == [[0], [1]], one_way


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(None) == (torch.device("cuda", torch.cuda.current_device())
                                    if HAS_CUDA else torch.device("cpu"))
    assert resolve_device(1) == torch.device("cuda", 1)
    assert resolve_device("CPU") == torch.device("cpu")  # torch-quiver's spelling
    for bad in ("GPU0", "cuda:-1", [1]):  # named as given  # torch's own errors named no argument
        with pytest.raises(ValueError,
                           match=f"device must be a torch.device, .* got {re.escape(repr(bad))}"):
            resolve_device(bad)
