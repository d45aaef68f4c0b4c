"""Distributed features: one table split over hosts, read as one.

* :func:`build_shard_map` decides where each row lives (``torch.classes.quiver.ShardMap``):
  the hottest rows replicated on every host, the rest partitioned (contiguous ranges of
  ids, or a given assignment such as METIS parts).
* :func:`partition_features` writes each host's local table and the shard map to a
  directory, checking what it reads back (sizes and a CRC-32), and :func:`load_shard_map`
  reads the map.
* :class:`DistFeature` is ``feature[ids]`` across hosts: rows this host holds come from
  its own tiered store (:class:`Feature`), the others through a transport
  (``torch.classes.quiver.Transport``): one-sided RDMA READs (rdma-core verbs, when a
  device exists), or torch.distributed collectives (NCCL between GPUs, Gloo on CPUs) over
  a process group whose ranks are the hosts.

Under ``torchrun --nnodes H --nproc-per-node M``, the hosts are nodes: :func:`host_groups`
makes the M groups (one per local rank) that each connect one process of every node.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import secrets
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
from torch import Tensor

from . import _sharing, preflight
from ._interrupts import ctrl_c_ends_waits, runtime_timeout
from ._device import is_int, readable_ids
from .feature import Feature, _thread_host_read_blocks, serve_to_peers, stop_serving
from .hotness import check_hot_order

TRANSPORTS = ("auto", "rdma", "nccl", "gloo")


def build_shard_map(num_rows: int, num_hosts: int, hot_order: Optional[Tensor] = None,
                    replicate_fraction: float = 0.2,
                    assignment: Optional[Tensor] = None) -> "torch.ScriptObject":
    """Where each of ``num_rows`` rows lives on ``num_hosts`` hosts.

    The hottest ``replicate_fraction`` of the rows (by ``hot_order``, hottest first;
    default: by id) are replicated on every host; every other row goes to
    ``assignment[id]`` when given (one host per row), else to contiguous ranges of ids.
    """
    if not is_int(num_rows) or num_rows < 0:
        raise ValueError(f"num_rows must be an int >= 0, got {num_rows!r}")
    if not is_int(num_hosts) or num_hosts < 1:
        raise ValueError(f"num_hosts must be an int >= 1, got {num_hosts!r}")
    if (isinstance(replicate_fraction, bool) or not isinstance(replicate_fraction, (int, float))
            or not 0.0 <= replicate_fraction <= 1.0):
        raise ValueError(f"replicate_fraction must be a number in [0, 1], got "
                         f"{replicate_fraction!r}")
    # A row's host (int32) and index there (int64), and the order (int64): past the memory
    # there is, torch's storage size overflowed or the process was killed filling them.
    preflight.check_host_memory(20 * num_rows, f"a shard map of num_rows={num_rows:,}",
                                "check num_rows")
    # Every row once: a short order would leave rows on no host, to fail later as ids.
    order = (torch.arange(num_rows, device="cpu") if hot_order is None
             else check_hot_order(hot_order, num_rows))
    replicated = int(round(replicate_fraction * num_rows))
    return torch.classes.quiver.ShardMap.build(order, num_hosts, replicated, assignment)


def partition_features(x: Tensor, directory: Union[str, Path], num_hosts: int,
                       hot_order: Optional[Tensor] = None, replicate_fraction: float = 0.2,
                       assignment: Optional[Tensor] = None) -> Path:
    """Writes ``directory/shard_map`` and one ``directory/host_<h>`` per host (that host's
    local table: replicated rows first, then its own, hottest first), for
    :meth:`DistFeature.load`. Every file is read back and checked against the sizes and the
    CRC-32 written beside it, so a truncated or corrupt shard raises here, never later as
    zeros."""
    directory = Path(directory)
    _sharing.check_row_table(x, "x")  # before a host folder of an earlier run is written over
    x = x.detach().cpu().contiguous()
    shard_map = build_shard_map(x.size(0), num_hosts, hot_order, replicate_fraction, assignment)
    # One id a run, in every folder: the fingerprint names the map's shape, not the table's
    # rows, so host folders of two runs (one cut short, or a stale copy on one machine)
    # would load together and serve each other's rows.
    run = secrets.randbits(62)
    for host in range(num_hosts):
        local = x[shard_map.local_ids(host)]
        # Feature's format, marked with the map, the run and the host it was cut for
        # (DistFeature.load checks them: a host folder left from another partitioning has
        # the same row count).
        _sharing.save_arrays(directory / f"host_{host}", "feature", {"rows": local},
                             fingerprint=shard_map.fingerprint(), host=host, run=run)
        rows, _ = _sharing.map_arrays(directory / f"host_{host}", "feature", verify=True)
        # Compared as bytes: a NaN (a missing feature, often) is unequal to itself.
        if not torch.equal(rows["rows"].reshape(-1).view(torch.uint8),
                           local.reshape(-1).view(torch.uint8)):
            raise RuntimeError(f"{directory}/host_{host} reads back different rows than written")
    # Last: a run that stops before here leaves no map naming its run.
    _sharing.save_arrays(directory / "shard_map", "shard_map",
                         {"host_of": shard_map.host_of(), "local_index": shard_map.local_index()},
                         num_hosts=num_hosts, fingerprint=shard_map.fingerprint(), run=run)
    load_shard_map(directory, verify=True)
    return directory


def load_shard_map(directory: Union[str, Path], verify: bool = False) -> "torch.ScriptObject":
    """The shard map written by :func:`partition_features` (sizes always checked, the CRC-32
    with ``verify``)."""
    return _load_shard_map(directory, verify)[0]


def _load_shard_map(directory, verify: bool) -> Tuple["torch.ScriptObject", Optional[int]]:
    """The shard map and the id of the run that wrote it (None for saves before runs had
    one)."""
    arrays, meta = _sharing.map_arrays(Path(directory) / "shard_map", "shard_map", verify=verify,
                                       names=("host_of", "local_index"),
                                       required=("host_of", "local_index"))
    if not is_int(meta.get("num_hosts")) or not is_int(meta.get("fingerprint")):
        raise ValueError(f"{directory}/shard_map names no host count and fingerprint: it is not "
                         f"a shard map of partition_features")
    if not 1 <= meta["num_hosts"] < 2 ** 63:  # (past int64, the class's binding said 'int')
        raise ValueError(f"{directory}/shard_map names {meta['num_hosts']} hosts: it is corrupt")
    for name, array in arrays.items():
        if array.dtype.is_floating_point or array.dtype.is_complex or array.dtype == torch.bool:
            raise ValueError(f"{directory}/shard_map ({name}.bin) holds {array.dtype}, not integer "
                             f"ids: it is corrupt")
    try:
        shard_map = torch.classes.quiver.ShardMap(arrays["host_of"].clone(),
                                                  arrays["local_index"].clone(),
                                                  meta["num_hosts"])
    except (ValueError, IndexError) as error:  # the map's own words name no file
        raise type(error)(f"{directory}/shard_map (host_of.bin, local_index.bin) is no valid "
                          f"shard map: {error}") from None
    if shard_map.fingerprint() != meta["fingerprint"]:
        raise ValueError(f"{directory}/shard_map does not match the fingerprint it was saved "
                         f"with: the files are from different partitions")
    return shard_map, meta.get("run")


def host_groups(backend: Optional[str] = None):
    """Under ``torchrun --nnodes H --nproc-per-node M``: the process group of this
    process's local rank (one process per node, its rank the node's index), made on every
    process. With one process per node, the world itself (or, for a ``backend`` other than
    the world's, a group of every rank with that backend)."""
    text = os.environ.get("LOCAL_WORLD_SIZE", "1")
    world = dist.get_world_size()
    local_size = int(text) if text.strip().isdigit() else 0
    if local_size < 1 or world % local_size:
        raise ValueError(f"LOCAL_WORLD_SIZE={text!r} must be a whole number of processes per "
                         f"node that divides WORLD_SIZE={world} (torchrun sets both)")
    if local_size == 1:
        if backend is None or backend == dist.get_backend():
            return dist.group.WORLD
        return dist.new_group(list(range(world)), backend=backend)
    mine = None
    for local_rank in range(local_size):
        ranks = list(range(local_rank, world, local_size))
        group = dist.new_group(ranks, backend=backend)
        if dist.get_rank() in ranks:
            mine = group
    return mine


def gloo_twin(group=None):
    """``group`` (default: the world) when it runs Gloo, else a Gloo group over the same
    ranks, for exchanges of CPU tensors (the partitioned sampler's) beside an NCCL group.
    A collective call when it makes one: every rank of the world calls it."""
    group = group if group is not None else dist.group.WORLD
    if dist.get_backend(group) == "gloo":
        return group
    return dist.new_group(dist.get_process_group_ranks(group), backend="gloo")


# Gloo groups the rows of a collective transport travel over, per group of hosts: made
# once and kept, because groups made with local synchronization are named by how many
# groups exist, so a destroyed lane's name would come back, and its stale rendezvous keys
# in the store with it. They are let go of at exit, while the interpreter still runs: a
# Gloo group destroyed during the interpreter's finalization can abort the process
# ("terminate called without an active exception", seen at the end of torchrun jobs).
_LANES: dict = {}
atexit.register(_LANES.clear)


MAX_LANES = 64  # Gloo lanes (8 moved twice what 1 did; 10,000 took minutes to set up)


def not_a_group(group) -> Optional[ValueError]:
    """The error for a ``group`` that is neither None (the default group) nor a process
    group, else None: raised by the callers after they tell the other hosts over the default
    group (torch's own error, that the group "world" was not initialized, came on one host
    alone)."""
    if group is None or isinstance(group, dist.ProcessGroup):
        return None
    return ValueError(f"group must be a torch.distributed ProcessGroup or None (the default "
                      f"group), got {group!r}")


def check_lanes(lanes) -> None:
    """Each lane is a process group with a connection to every host, kept until exit."""
    if not is_int(lanes) or not 1 <= lanes <= MAX_LANES:
        raise ValueError(f"lanes must be an int in [1, {MAX_LANES}], got {lanes!r}")


def _gloo_lanes(group, count: int, timeout: float, user: str = "features") -> list:
    """``count`` lanes over ``group``'s hosts (none for one lane: the group itself), of their
    ``user``: the features' lanes and the partitioned sampler's are not shared, since a
    loader may fetch rows while it samples the next batch, and two exchanges posting on one
    Gloo group from two threads could pair one's messages with the other's."""
    if count <= 1:
        return []
    key = (group, user)
    lanes = [lane for lane in _LANES.get(key, []) if _registered(lane)]
    ranks = dist.get_process_group_ranks(group)
    while len(lanes) < count:  # every host asks for the same lanes in the same order
        lanes.append(_new_gloo_group(ranks, timeout, f"lane {len(lanes)} for {user}"))
    _LANES[key] = lanes
    return lanes[:count]


def _new_gloo_group(ranks: list, timeout: float, what: str):
    """A Gloo group over ``ranks`` made with local synchronization; a host that does not
    come (dead, or running other code) is a RuntimeError saying so, not the store's bare
    key timeout."""
    try:
        return dist.new_group(ranks, timeout=timedelta(seconds=timeout), backend="gloo",
                              use_local_synchronization=True)
    except RuntimeError as error:  # the store's DistStoreError among them
        raise RuntimeError(
            f"connecting {what} among hosts {ranks} failed within {timeout:g} s: a host "
            f"did not come (dead, or building another store or sampler at this point), or "
            f"the hosts cannot reach each other. It said: {error}") from error


# Gloo groups of one collective transport each (a DistFeature's, a DistGraphSampler's),
# kept until exit like the lanes above, and for the same reason.
_OWN_GROUPS: list = []
atexit.register(_OWN_GROUPS.clear)


def _own_group(group, timeout: float):
    """A Gloo group over ``group``'s hosts for one collective transport alone. Two
    transports posting on one Gloo group from two threads (a feature fetched on its own
    thread by ``gather_async`` while another is gathered, or while the sampler exchanges)
    would pair one's messages with the other's in whatever order each host's threads ran,
    and Gloo aborts the process on a size it did not expect. Every host makes it at the
    same point, as it makes the transport (or takes back the one a refused transport left
    unused: _spare_own_group)."""
    spares = _SPARE_GROUPS.get(group, [])
    while spares:
        own = spares.pop()
        if _registered(own):
            return own
    own = _new_gloo_group(dist.get_process_group_ranks(group), timeout, "a transport's group")
    _OWN_GROUPS.append(own)
    return own


# Own groups (and, keyed by them in _LANES, their lanes) whose transport the hosts refused
# together, by the group they were made over: the next transport over it takes one back.
_SPARE_GROUPS: dict = {}
atexit.register(_SPARE_GROUPS.clear)


def _spare_own_group(group, own) -> None:
    """Keeps ``own``, made over ``group`` for a transport the hosts' agreement refused (a
    ValueError on every host at once, through the store: the group is untouched), for the
    next transport over ``group``. Each refused DistFeature had made a group and its lanes
    kept until exit, and a retry new ones (a probe: 45 descriptors and 27 threads a
    refusal, with 8 lanes). (A host that failed otherwise meanwhile, its wait for the
    agreement timed out, keeps none: the next attempt then fails once on every host, out of
    step, and the one after it lines up again.)"""
    _SPARE_GROUPS.setdefault(group, []).append(own)


def _rdma_options(given: Optional[dict], **defaults) -> dict:
    """The RDMA transport's options: the runtime's defaults, then ``defaults``, then the
    caller's ``given`` (a key the transport does not know is a ValueError)."""
    known = {"device": "", **torch.classes.quiver.Transport.rdma_defaults()}
    if given is not None and not isinstance(given, dict):
        raise ValueError(f"rdma takes a dict of options {sorted(known)}, got {given!r}")
    unknown = sorted(set(given or {}) - set(known))
    if unknown:
        raise ValueError(f"rdma options are {sorted(known)}, got unknown {unknown}")
    for name, value in (given or {}).items():
        if name == "device" and not isinstance(value, str):
            raise ValueError(f"rdma option device must be a device name (a str, '' for the "
                             f"first), got {value!r}")
        if name != "device" and (isinstance(value, bool) or not isinstance(value, int)
                                 or not -2**63 <= value < 2**63):
            # (past int64, the binding's own error came on this host only, the others
            # then waiting out the timeout for it to agree)
            raise ValueError(f"rdma option {name} must be an int64, got {value!r}")
    return {**known, **defaults, **(given or {})}


def _rdma_available() -> bool:
    """Whether this machine lists an RDMA device (a function of its own so that tests can
    stand in for a machine that has one)."""
    return torch.classes.quiver.Transport.rdma_available()


def _rdma_devices() -> List[str]:
    """The RDMA devices this machine lists (a function of its own, as _rdma_available)."""
    return list(torch.classes.quiver.Transport.rdma_devices())


def _rdma_options_problem(options: dict) -> str:
    """What the RDMA transport would refuse in ``options`` ("" for nothing), found before
    any host connects so that DistFeature's setup agreement tells every host at once."""
    try:
        torch.classes.quiver.Transport.check_rdma_options(
            options["port"], options["gid_index"], options["qps_per_peer"],
            options["staging_bytes"])
    except ValueError as error:
        return f"rdma options: {error}"
    devices = _rdma_devices()
    if options["device"] and options["device"] not in devices:
        return (f"rdma option device {options['device']!r} is not one of this host's RDMA "
                f"devices {devices}")
    return ""


DEFAULT_TIMEOUT = 60.0  # seconds: DistFeature's and DistGraphSampler's default


def _checked_timeout(timeout) -> float:
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout) or not 0 < timeout <= 365 * 24 * 3600):
        raise ValueError(f"timeout must be a finite number of seconds in (0, 1 year], got "
                         f"{timeout!r}")
    return float(timeout)


def _registered(group) -> bool:
    try:
        dist.get_process_group_ranks(group)
        return True
    except (ValueError, KeyError, RuntimeError):  # destroyed with the world's group
        return False


def _setup_text(asked: str, rdma: bool, lanes: int, backend: str, problem: str,
                run: Optional[int], name: Optional[str] = None) -> str:
    """What a host says in DistFeature's setup agreement."""
    return json.dumps({"asked": asked, "rdma": rdma, "lanes": lanes, "backend": backend,
                       "problem": problem, "run": run, "name": name}, sort_keys=True)


def _tell_hosts(group, topic: str, text: str, timeout) -> None:
    """This host's part of the setup agreement on ``topic`` when it refuses its own
    arguments, published without waiting for the others' texts (Transport.tell): the other
    hosts then raise naming it, at once, and so does this one. Host 0 waits for their reads
    at most ``timeout``, or the default when the problem told is the timeout itself. Best
    effort: errors of the store are left to the caller's own error."""
    try:
        timeout = _checked_timeout(timeout)
    except ValueError:
        timeout = DEFAULT_TIMEOUT
    try:
        torch.classes.quiver.Transport.tell(group.boxed(), topic, text, timeout)
    except Exception:  # noqa: BLE001  (best effort: the caller raises its own error)
        pass


def _tell_setup_problem(group, asked, lanes, timeout, problem: str) -> None:
    """DistFeature's part of its setup agreement when it cannot construct one (_tell_hosts);
    the arguments as text when the problem is one of them (json takes any str)."""
    try:
        text = _setup_text(str(asked), False, lanes if is_int(lanes) else repr(lanes),
                           dist.get_backend(group), problem, None)
    except Exception:  # noqa: BLE001  (a group without a backend: nothing can be told)
        return
    _tell_hosts(group, "dist-feature-setup", text, timeout)


_FETCH_NOT_DONE_IN_TIME = "the fetch did not finish within"  # FetchWork::wait's words


class PendingRows:
    """A fetch started by :meth:`DistFeature.gather_async`. A Python object over the
    runtime's FetchWork so that Ctrl-C in ``wait`` is a KeyboardInterrupt at once, as in the
    store's other waits, not a line later."""

    __slots__ = ("_work",)

    def __init__(self, work: "torch.ScriptObject"):
        self._work = work

    @ctrl_c_ends_waits
    def wait(self, timeout: Optional[float] = None) -> Tensor:
        """The rows, waiting up to ``timeout`` seconds (None: no limit; 0 or less: only
        rows already in, as ``ServingRuntime``'s ``result`` and concurrent.futures). Past
        it, ``TimeoutError``, and the fetch goes on: a later wait may take its rows. The rows
        go to the first caller; a second wait raises."""
        try:
            return self._work.wait(runtime_timeout(timeout))
        except RuntimeError as error:
            if _FETCH_NOT_DONE_IN_TIME in str(error):
                raise TimeoutError(str(error).splitlines()[0]) from None
            raise

    def done(self) -> bool:
        """Whether ``wait`` would return (or raise) without waiting."""
        return self._work.done()


def _check_local_feature(local) -> None:
    """That ``local`` is a Feature holding its rows: a closed or empty one had raised on its
    own host only, after the transport's set-up, leaving the peers waiting for it."""
    if not isinstance(local, Feature):
        raise ValueError(f"local must be a torch_quiver_ops.Feature, got {type(local).__name__}")
    try:
        local.table
    except RuntimeError as error:
        raise ValueError(f"local: {error}") from None


class DistFeature:
    """A feature table split over hosts: ``feature[ids]`` returns the rows of global ids.

    Args:
        shard_map: where each row lives (:func:`build_shard_map`, :func:`load_shard_map`).
        local: this host's store of its local table (``shard_map.local_rows(host)`` rows in
            local order: hottest first, so its GPU cache holds the hottest rows).
        group: the process group whose ranks are the hosts (default: the world).
        transport: ``"auto"`` (RDMA when every host has an RDMA device, else NCCL when
            the group's backend is NCCL, else Gloo), ``"rdma"`` (one-sided reads; the group
            only exchanges endpoints), ``"nccl"`` or ``"gloo"`` (collectives over ``group``).
        timeout: seconds a fetch may wait for a peer before it raises naming the peer
            (longer when the peer is alive but held up elsewhere, by the time its heartbeat
            is watched to tell a slow peer from a dead one: five beats, a tenth of the
            timeout each, at most a second in groups of up to 33 hosts over Gloo or NCCL;
            half the timeout over RDMA).
        rdma: options of the RDMA transport: ``device`` (default: the first), ``port``,
            ``gid_index`` (-1: RoCE v2 over IPv4 when the port has it), ``qps_per_peer``,
            ``staging_bytes`` (another key is a ValueError).
        lanes: Gloo only: how many connections the rows travel over side by side (each a
            process group of its own over the group's hosts). Over Gloo each DistFeature
            makes its lanes and one more group for its other exchanges: two DistFeatures,
            or one and a partitioned sampler, share no connection, so one may fetch on
            its own thread (``gather_async``) while another exchanges. Those groups are
            kept until the process exits, even past ``close`` and
            ``destroy_process_group`` (see ``_LANES``): about 3 threads and 4 file
            descriptors each, so make one DistFeature a table and keep it, rather than
            one an epoch. One TCP stream carries about
            2 GB/s; 8 lanes moved about twice as much on the two-H200 host's loopback
            (docs/benchmarks.md). A peer's rows take one lane per 512 KiB, so a small
            fetch travels on one lane: splitting it only cost messages.
        name: the table's name, which every host must give alike (checked when they
            connect). Hosts must build their DistFeatures in the same order, as for any
            collective: two tables of one shard map, dtype and shape built in different
            orders would be paired with each other's rows, and only a name tells them apart
            (:meth:`load` also tells apart tables of different ``partition_features`` runs).

    With a collective transport every host reads ``feature[ids]`` once per step, as a
    training loop does: a host serves its peers' requests while it fetches its own. With
    RDMA a host reads its peers' registered tables without their CPUs, whenever it likes.
    """

    @ctrl_c_ends_waits
    def __init__(self, shard_map, local: Feature, group=None, transport: str = "auto",
                 timeout: float = 60.0, rdma: Optional[dict] = None, lanes: int = 8, *,
                 name: Optional[str] = None, _run: Optional[int] = None):
        self._run = _run  # partition_features' run, when load() read one: hosts must agree
        try:
            if name is not None and not isinstance(name, str):
                raise ValueError(f"name must be a str or None, got {name!r}")
            if transport not in TRANSPORTS:
                raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
            bad_group = not_a_group(group)
            if bad_group is not None:
                group = None  # the problem told over the default group
                raise bad_group
            check_lanes(lanes)
            timeout = _checked_timeout(timeout)
            _check_local_feature(local)
        except ValueError as error:  # told to the other hosts, which then raise at once
            if dist.is_available() and dist.is_initialized():
                _tell_setup_problem(group if group is not None else dist.group.WORLD,
                                    transport, lanes, timeout, str(error))
            raise
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("DistFeature needs torch.distributed: call "
                               "init_process_group first (torchrun sets up its environment)")
        self.name = name
        self.timeout = timeout
        self.group = group if group is not None else dist.group.WORLD
        backend = dist.get_backend(self.group)
        self.shard_map = shard_map
        self.local = local
        self.host = dist.get_rank(self.group)
        self.device = (torch.device("cuda", torch.cuda.current_device()) if backend == "nccl"
                       else local.device_for())
        try:
            options = _rdma_options(rdma)
        except ValueError as error:  # told to the other hosts, which then raise at once
            _tell_setup_problem(self.group, transport, lanes, timeout, str(error))
            raise
        transport = self._agree_on_transport(transport, backend, lanes, timeout, options)
        if transport == "rdma":
            # Peers read this host's whole local table, in local order.
            self.transport = torch.classes.quiver.Transport.rdma(
                self.group.boxed(), local.table, options["device"], options["port"],
                options["gid_index"], options["qps_per_peer"], options["staging_bytes"], timeout)
        else:
            exchanges, chosen = self.group, []
            if transport == "gloo":  # a group and lanes of its own (see _own_group)
                exchanges = _own_group(self.group, timeout)
                chosen = _gloo_lanes(exchanges, lanes, timeout)
            self.transport = torch.classes.quiver.Transport.collective(
                exchanges.boxed(), timeout, [lane.boxed() for lane in chosen])
        # The runtime checks, among all hosts, that they hold the same shard map and rows of
        # one dtype and shape (a ValueError on every host, naming the hosts that differ).
        tiers = local.tiers(self.device)
        try:  # (its own problems are told in that agreement too: all hosts raise, or none)
            self._runtime = torch.classes.quiver.DistFeature(shard_map, tiers, self.transport)
        except ValueError:
            if transport == "gloo":
                self.transport = None  # (its heartbeat thread goes with it)
                _spare_own_group(self.group, exchanges)
            raise
        # This host's fetches in flight (gathers in any thread, and gather_async's works):
        # over RDMA they read the peers' registered tables, which close() lets go of only
        # after the hosts agree, so each host first waits for its own.
        self._fetches = threading.Condition()
        self._gathering = 0
        self._async_works: List["torch.ScriptObject"] = []
        serve_to_peers(local, self)

    def __reduce__(self):
        # (pickle said "cannot pickle ProcessGroup", naming neither this class nor the fix)
        raise TypeError("a DistFeature is bound to this process's process group and "
                        "transport: build one in each process (DistFeature.load, or "
                        "DistFeature(shard_map, local)), not a copy")

    def _agree_on_transport(self, asked: str, backend: str, lanes: int, timeout: float,
                            options: dict) -> str:
        """The transport every host uses, decided by all of them together (through the
        rendezvous store, within ``timeout``): ``"auto"`` picks RDMA only when every host has
        a device. Hosts that asked for different transports or lanes, or that cannot set up
        theirs (the locked-memory limit for RDMA), raise a ValueError together, naming the
        hosts, instead of waiting on each other in different exchanges."""
        rdma_here = _rdma_available() if asked in ("auto", "rdma") else False
        problem = ""
        if asked in ("nccl", "gloo") and asked != backend:
            problem = (f"transport {asked!r} needs a {asked} process group, but the group's "
                       f"backend is {backend}")
        elif asked == "rdma" and not rdma_here:
            problem = "transport 'rdma' asked for, but this host lists no RDMA device"
        if not problem and rdma_here:
            problem = _rdma_options_problem(options)
        if not problem and rdma_here:
            try:  # peers read the whole local table; the staging buffer is registered too
                preflight.check_memlock(self.local.table.nbytes + options["staging_bytes"],
                                        "the RDMA transport's registered memory")
                preflight.check_host_memory(options["staging_bytes"],
                                            "the RDMA transport's staging buffer",
                                            "give a smaller rdma staging_bytes")
            except preflight.ResourceLimitError as error:
                problem = str(error) if asked == "rdma" else ""
                rdma_here = False  # "auto" falls back to the collectives on every host
        texts = torch.classes.quiver.Transport.agree(
            self.group.boxed(), "dist-feature-setup",
            _setup_text(asked, rdma_here, lanes, backend, problem, self._run, self.name), timeout)
        everyone = [json.loads(text) for text in texts]
        troubled = {h: e["problem"] for h, e in enumerate(everyone) if e["problem"]}
        if troubled:
            raise ValueError("DistFeature cannot connect its hosts: " + "; ".join(
                f"host {h}: {why}" for h, why in troubled.items()))
        if len({e["name"] for e in everyone}) > 1:
            raise ValueError("the hosts built different tables at this point: " + ", ".join(
                f"host {h} name {e['name']!r}" for h, e in enumerate(everyone)) +
                ": every host must build its DistFeatures in the same order, with the same "
                "names")
        runs = {e["run"] for e in everyone}
        if len(runs) > 1:
            raise ValueError("the hosts loaded shards of different partition_features runs: " +
                             ", ".join(f"host {h} run {e['run']}"
                                       for h, e in enumerate(everyone)) +
                             ": a host's copy of the folder is stale; copy the whole output "
                             "of one run to every host")
        for key, what in (("asked", "transport"), ("backend", "process group backend")):
            values = {e[key] for e in everyone}
            if len(values) > 1:
                raise ValueError(f"the hosts asked for different {what}s: " + ", ".join(
                    f"host {h} {e[key]!r}" for h, e in enumerate(everyone)) +
                    ": every host must construct its DistFeature alike")
        chosen = asked
        if asked == "auto":
            chosen = "rdma" if all(e["rdma"] for e in everyone) else backend
        if chosen == "gloo" and len({e["lanes"] for e in everyone}) > 1:
            raise ValueError("the hosts asked for different lanes: " + ", ".join(
                f"host {h} {e['lanes']}" for h, e in enumerate(everyone)) +
                ": every host must construct its DistFeature alike")
        return chosen

    @classmethod
    def load(cls, directory: Union[str, Path], group=None, rank: int = 0,
             device_list: Optional[Sequence[int]] = None, device_cache_size: Union[int, str] = 0,
             cache_policy: str = "device_replicate", transport: str = "auto",
             timeout: float = 60.0, rdma: Optional[dict] = None,
             lanes: int = 8, verify: bool = False, name: Optional[str] = None) -> "DistFeature":
        """Maps this host's shard of :func:`partition_features`'s output (one copy per
        machine, as :meth:`Feature.load_shared`) and connects to the other hosts.
        ``verify`` checks the files' CRC-32 too, not only their sizes."""
        group = group if group is not None else dist.group.WORLD
        host = dist.get_rank(group)
        try:
            shard_map, run = _load_shard_map(directory, verify)
            if shard_map.num_hosts() != dist.get_world_size(group):
                raise ValueError(f"{directory} is cut for {shard_map.num_hosts()} hosts, but "
                                 f"the process group has {dist.get_world_size(group)}")
            _, meta = _sharing.map_arrays(Path(directory) / f"host_{host}", "feature",
                                          names=("rows", "order"), required=("rows",))
            if ((meta.get("fingerprint"), meta.get("host"), meta.get("run"))
                    != (shard_map.fingerprint(), host, run)):
                raise ValueError(
                    f"{directory}/host_{host} was not cut for host {host} of this shard map "
                    f"(it names fingerprint {meta.get('fingerprint')}, host {meta.get('host')} "
                    f"and run {meta.get('run')}; the map's are {shard_map.fingerprint()} and "
                    f"run {run}): it is left from another partitioning (or one cut short), "
                    f"or written before the folders were marked; run partition_features again")
            local = Feature.load_shared(Path(directory) / f"host_{host}", rank, device_list,
                                        device_cache_size, cache_policy, verify=verify)
        except (ValueError, TypeError, IndexError, OSError) as error:
            # Told to the other hosts, which wait in the setup's agreement, so that every
            # host raises at once rather than after the timeout with nothing said.
            _tell_setup_problem(group, transport, lanes, timeout,
                                f"loading {directory}: {error}")
            raise
        return cls(shard_map, local, group, transport, timeout, rdma, lanes, name=name, _run=run)

    @ctrl_c_ends_waits
    def close(self) -> None:
        """Lets go of the transport (its queue pairs and registrations, or its hold on the
        process group): call it on every host before ``destroy_process_group``. Over RDMA,
        peers read this host's table without its CPU, so the hosts first wait for each
        other (at most the timeout; a host that never closes is named) before any
        registration goes. The store is unusable afterwards."""
        # Held in locals until the hosts agree: the runtime owns the registrations that
        # peers may still be reading.
        with self._fetches:
            transport, runtime = self.transport, self._runtime
            self._runtime = self.transport = None
        stop_serving(self.local, self)
        if transport is not None and transport.kind().startswith("rdma"):
            # A fetch of this host's still in flight reads peers that, once agreed, let go
            # of their tables: it had waited out the whole timeout and then blamed a live
            # peer ("host 1 has stopped answering"), a probe.
            self._wait_for_own_fetches(time.monotonic() + self.timeout)
            try:
                torch.classes.quiver.Transport.agree(self.group.boxed(), "dist-feature-close",
                                                     "", self.timeout)
            finally:
                runtime = transport = None

    def _wait_for_own_fetches(self, deadline: float) -> None:
        """Waits until this host's gathers and gather_async fetches have finished, or
        ``deadline`` (time.monotonic()) has passed: a fetch left then ends as the peers'
        going makes it end."""
        with self._fetches:
            while self._gathering and time.monotonic() < deadline:
                self._fetches.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            works, self._async_works = self._async_works, []
        for work in works:
            while not work.done() and time.monotonic() < deadline:
                time.sleep(0.005)

    @contextlib.contextmanager
    def _fetching(self):
        """The runtime, counted as one gather in flight while the block runs."""
        with self._fetches:
            if self._runtime is None:
                raise RuntimeError("this DistFeature was closed")
            self._gathering += 1
            runtime = self._runtime
        try:
            yield runtime
        finally:
            with self._fetches:
                self._gathering -= 1
                self._fetches.notify_all()

    def __enter__(self) -> "DistFeature":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _ids(self, ids) -> Tensor:
        if self._runtime is None:
            raise RuntimeError("this DistFeature was closed")
        try:
            ids = readable_ids(ids)
            return (ids if ids.device == self.device else ids.to(self.device)).contiguous()
        except (TypeError, ValueError, RuntimeError, NotImplementedError):
            # Ids that cannot even be read (None, a meta tensor): this host still takes its
            # turn in the step, with none, as it does for ids the runtime refuses; skipping
            # it would pair every later step with the peers' next one.
            try:
                self._runtime.gather(torch.empty(0, dtype=torch.long, device=self.device),
                                     _thread_host_read_blocks())
            except RuntimeError:
                pass  # a peer gone too: the ids' own error says more
            raise

    @ctrl_c_ends_waits
    def __getitem__(self, ids) -> Tensor:
        # This host's own rows come through its local Feature's layout, read as that
        # Feature's host_reads says, with this thread's block cap (feature.host_read_blocks).
        ids = self._ids(ids)  # first: it names a closed store
        with self._fetching() as runtime:
            return runtime.gather(ids, _thread_host_read_blocks())

    def gather_async(self, ids) -> "PendingRows":
        """Starts ``self[ids]`` on a side stream and thread; ``.wait(timeout)`` on the result
        returns the rows, ordered after the fetch on the current stream."""
        ids = self._ids(ids)
        with self._fetching() as runtime:
            work = runtime.gather_async(ids, _thread_host_read_blocks())
            with self._fetches:  # (the done ones let go: a work holds its rows)
                self._async_works = [w for w in self._async_works if not w.done()] + [work]
        return PendingRows(work)

    @property
    def last_local_fraction(self) -> float:
        """The share of the last gather's ids this host served from its own table."""
        if self._runtime is None:
            raise RuntimeError("this DistFeature was closed")
        return self._runtime.last_local_fraction()

    @property
    def shape(self) -> torch.Size:
        return torch.Size([self.shard_map.num_rows(), *self.local.shape[1:]])

    @property
    def dtype(self) -> torch.dtype:
        return self.local.dtype

    def __len__(self) -> int:
        return self.shard_map.num_rows()

    def __repr__(self) -> str:
        kind = "closed" if self.transport is None else self.transport.kind()
        return (f"DistFeature(rows={self.shard_map.num_rows()}, host={self.host} of "
                f"{self.shard_map.num_hosts()}, transport={kind})")
