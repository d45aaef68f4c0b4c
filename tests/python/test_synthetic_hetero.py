"""The ogbn-mag-like generator (counts, relations, learnable labels, seeding) and the
MAG240M-sized builder (its slice-at-a-time CSR is exactly the CSR that HeteroCSRTopo builds
from the same edges), at small scales on the CPU."""
import pytest
import torch

import torch_quiver_ops as qv
from torch_quiver_ops.synthetic_hetero import (MAG240M_NODES, MAG_NODES, MAG_RELATIONS,
                                               mag240m_like, mag240m_like_features, mag_like)


def test_mag_like_counts_relations_and_seeding():
    g = mag_like(scale=0.01, seed=3, num_features=16, num_classes=20)
    assert g.num_nodes_dict == {t: int(n * 0.01) for t, n in MAG_NODES.items()}
    assert len(g.edge_index_dict) == 7
    for src, rel, dst, count in MAG_RELATIONS:
        ei = g.edge_index_dict[(src, rel, dst)]
        assert ei.size(1) == int(count * 0.01) * (2 if src == dst else 1)
        if src != dst:
            assert torch.equal(g.edge_index_dict[(dst, f"rev_{rel}", src)], ei.flip(0))
    for (src, _, dst), ei in g.edge_index_dict.items():
        assert int(ei[0].min()) >= 0 and int(ei[0].max()) < g.num_nodes_dict[src]
        assert int(ei[1].min()) >= 0 and int(ei[1].max()) < g.num_nodes_dict[dst]
    cites = g.edge_index_dict[("paper", "cites", "paper")]
    assert not bool((cites[0] == cites[1]).any())  # 11-50% of them had been self-loops
    papers = g.num_nodes_dict["paper"]
    assert g.x_dict["paper"].shape == (papers, 16) and list(g.x_dict) == ["paper"]
    assert int(g.y.min()) >= 0 and int(g.y.max()) < 20
    split = torch.cat([g.train_idx, g.val_idx, g.test_idx])
    assert torch.equal(split.sort().values, torch.arange(papers))
    assert abs(g.train_idx.numel() / papers - 0.855) < 0.01
    again = mag_like(scale=0.01, seed=3, num_features=16, num_classes=20)
    assert all(torch.equal(again.edge_index_dict[k], v) for k, v in g.edge_index_dict.items())
    assert torch.equal(again.x_dict["paper"], g.x_dict["paper"])
    data = g.to_hetero_data()
    assert data["paper"].train_mask.sum() == g.train_idx.numel()
    assert data["institution"].num_nodes == g.num_nodes_dict["institution"]


def test_mag_like_labels_are_learnable_from_neighbors():
    """Cited papers share their label far more often than chance, and the features lean
    toward the label's centroid: the signal a GNN reads."""
    g = mag_like(scale=0.01, seed=1, num_classes=20)
    cites = g.edge_index_dict[("paper", "cites", "paper")]
    same = (g.y[cites[0]] == g.y[cites[1]]).double().mean()
    assert same > 0.7  # homophily 0.8 plus chance 1/20
    centroids = torch.stack([g.x_dict["paper"][g.y == c].mean(0) for c in range(20)])
    nearest = (g.x_dict["paper"] @ centroids.t()).argmax(1)
    assert (nearest == g.y).double().mean() > 0.2  # far above 1/20
    degree = torch.bincount(cites[1], minlength=g.num_nodes_dict["paper"]).double()
    assert degree.max() > 10 * degree.mean()  # heavy tail


def test_mag240m_like_is_the_csr_of_its_own_edges():
    scale = 2e-5
    topo = mag240m_like(scale=scale, seed=2, chunk_nodes=300)  # several slices a type
    assert topo.num_nodes_dict == {t: max(1, int(n * scale)) for t, n in MAG240M_NODES.items()}
    assert len(topo.edge_types) == 5 and topo.indices.dtype == torch.int32
    # The edges back as edge_index_dict, rebuilt the ordinary way: the same arrays.
    row = torch.repeat_interleave(torch.arange(topo.num_nodes), topo.indptr.diff())
    edges = {}
    for r, (src, _, dst) in enumerate(topo.edge_types):
        lo, hi = topo.relation_edge_offsets[r], topo.relation_edge_offsets[r + 1]
        at = torch.empty(hi - lo, dtype=torch.long)
        mine = (topo.eid >= lo) & (topo.eid < hi)
        at[topo.eid[mine] - lo] = mine.nonzero().view(-1)
        edges[topo.edge_types[r]] = torch.stack([
            topo.indices[at].long() - topo.type_offset(src), row[at] - topo.type_offset(dst)])
        assert int(edges[topo.edge_types[r]].min()) >= 0
    rebuilt = qv.HeteroCSRTopo(edges, topo.num_nodes_dict)
    assert torch.equal(rebuilt.indptr, topo.indptr)
    assert torch.equal(rebuilt.indices, topo.indices)
    assert torch.equal(rebuilt.eid, topo.eid)
    given = topo.slice_starts
    topo._slice_starts = None  # computed from eid, as for any other graph
    assert torch.equal(given, topo.slice_starts)
    sampler = qv.HeteroSampler(topo, [3, 2], device="cpu", mode="CPU")
    out = sampler.sample(("paper", torch.arange(20)))
    assert sum(sum(v) for v in out.num_sampled_edges.values()) > 0
    x = mag240m_like_features(topo.num_nodes_dict["paper"], 8, chunk_rows=500)
    assert x.shape == (topo.num_nodes_dict["paper"], 8) and x.dtype == torch.bfloat16
    # every chunk drawn (standard normal values), none left unfilled
    assert x.size(0) > 1000 and bool((x.float().abs().sum(1) > 0).all())
    for start in range(0, x.size(0) - 499, 500):
        chunk = x[start:start + 500].float()
        assert abs(chunk.mean()) < 0.1 and abs(chunk.std() - 1) < 0.1, start


def test_from_csr_refuses_mismatched_sizes():
    topo = mag240m_like(scale=1e-5, seed=0)
    args = dict(num_nodes_dict=topo.num_nodes_dict, edge_types=topo.edge_types,
                indptr=topo.indptr, indices=topo.indices, eid=topo.eid,
                relation_edge_offsets=topo.relation_edge_offsets)
    import pytest
    for change, match in [(dict(indices=topo.indices[:-1]), "indices must hold"),
                          (dict(indptr=topo.indptr[:-1]), "indptr must hold"),
                          (dict(relation_edge_offsets=[0, 1]), "relation_edge_offsets needs"),
                          # (a decreasing one failed in a sampler's bincount; a probe)
                          (dict(relation_edge_offsets=[0, *topo.relation_edge_offsets[1:3][::-1],
                                                       *topo.relation_edge_offsets[3:]]),
                           r"relation_edge_offsets must run from 0 and never decrease"),
                          (dict(edge_types=[("paper", "x", "venue")]), "venue")]:
        with pytest.raises(ValueError, match=match):
            qv.HeteroCSRTopo.from_csr(**{**args, **change})


@pytest.mark.parametrize("kwargs", [dict(scale=0), dict(scale=-1), dict(scale=float("nan")),
                                    dict(num_classes=0), dict(num_classes=True)])
def test_sizes_that_give_no_graph_are_refused(kwargs):
    """scale <= 0 quietly gave one node a type; num_classes=0 failed inside torch.randint."""
    with pytest.raises(ValueError, match="scale must be a finite number > 0|num_classes must"):
        mag_like(**kwargs)
    if "scale" in kwargs:
        with pytest.raises(ValueError, match="scale must be a finite number > 0"):
            mag240m_like(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(homophily=5.0), "homophily must be a probability in"),
    (dict(feature_signal=float("nan")), "feature_signal must be a finite number"),
    (dict(num_features=0), "num_features must be an int >= 1"),
    (dict(scale=1e300), "mag_like"),  # past host memory: refused before anything is drawn
])
def test_mag_like_refuses_parameters_that_give_no_sensible_graph(kwargs, match):
    from torch_quiver_ops.preflight import ResourceLimitError
    with pytest.raises((ValueError, ResourceLimitError), match=match):
        mag_like(**{"scale": 1e-4, **kwargs})


@pytest.mark.parametrize("chunk_nodes", [0, -1, 2.5])
def test_mag240m_like_refuses_chunks_of_no_nodes(chunk_nodes):
    """-1 left the edge arrays unfilled, caught by luck as a mismatched indptr."""
    with pytest.raises(ValueError, match=f"chunk_nodes must be an int >= 1, got {chunk_nodes}"):
        mag240m_like(1e-5, chunk_nodes=chunk_nodes)


def test_seeds_of_the_wrong_kind_are_named():
    # manual_seed's own errors named no argument
    with pytest.raises(TypeError, match="seed must be an int, got 1.5"):
        mag_like(1e-4, seed=1.5)
    with pytest.raises(TypeError, match="seed must be an int, got 'a'"):
        mag240m_like(1e-6, seed="a")


@pytest.mark.parametrize("scale,seed", [(3e-4, 8), (1e-4, 5), (2e-5, 15), (2e-5, 17), (2e-5, 35)])
def test_small_graphs_cite_no_paper_of_their_own(scale, seed):
    """With few papers one may hold most of the weight (the cap does not bind), and it drew
    itself round after round: 292 of 3,248 citations at scale 3e-4 had been one paper's
    self-loops (a probe). Each case here had self-loops before."""
    graph = mag_like(scale=scale, seed=seed, num_features=1)
    cites = graph.edge_index_dict[("paper", "cites", "paper")]
    assert not bool((cites[0] == cites[1]).any())


def test_numpy_numbers_are_taken_and_bad_feature_arguments_named():
    """NumPy's numbers had been refused as "not an int"; mag240m_like_features checked
    nothing: chunk_rows=-1 returned the table unfilled, an integer dtype rounded every
    feature (a probe)."""
    import numpy as np
    a = mag_like(scale=np.float32(1e-4), num_classes=np.int64(5), num_features=np.int64(2))
    b = mag_like(scale=float(np.float32(1e-4)), num_classes=5, num_features=2)
    assert all(torch.equal(a.edge_index_dict[t], b.edge_index_dict[t])
               for t in a.edge_index_dict)
    topo = mag240m_like(1e-6, chunk_nodes=np.int64(8))
    assert torch.equal(topo.indptr, mag240m_like(1e-6, chunk_nodes=8).indptr)
    features = mag240m_like_features(np.int64(5), 3, seed=np.int64(1), chunk_rows=2)
    assert features.shape == (5, 3) and torch.equal(features,
                                                    mag240m_like_features(5, 3, seed=1))
    for kwargs, error, match in [
            (dict(chunk_rows=-1), ValueError, "chunk_rows must be an int >= 1, got -1"),
            (dict(chunk_rows=0), ValueError, "chunk_rows must be an int >= 1, got 0"),
            (dict(num_papers=-1), ValueError, "num_papers must be an int >= 0, got -1"),
            (dict(dtype=torch.int64), TypeError, "dtype must be a floating torch.dtype"),
            (dict(seed=1.5), TypeError, "seed must be an int, got 1.5")]:
        with pytest.raises(error, match=match):
            mag240m_like_features(**{"num_papers": 3, "num_features": 4, **kwargs})
