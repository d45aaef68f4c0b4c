"""Thousands of random and malformed calls of every op, on the CPU and (on a GPU machine) in
GPU and UVA placement: each either returns a correct result or raises a clear Python
exception of the documented type. Never a crash, and never a poisoned CUDA context: after
every batch of CUDA cases a plain CUDA computation must still run.

Each case is drawn by a seeded generator, so a failure names a case that can be replayed
(``case_index`` and the seed)."""
import random
import re

import pytest
import torch

import torch_quiver_ops as qv
from conftest import HAS_CUDA
from reference import csr_reference, picks_per_target, subgraph_sampler

CLEAR_ERRORS = (TypeError, ValueError, IndexError, RuntimeError)
CASES = {"CPU": 5000, "GPU": 1500, "UVA": 1500}


class Case:
    """One call: the op, its arguments, and what must happen. `must_raise` names the
    exception type a detectable fault must raise; `check(out)` verifies a valid call."""

    def __init__(self, op, args, must_raise=None, check=None, note=""):
        self.op, self.args, self.must_raise, self.check, self.note = op, args, must_raise, check, note


def check_per_target(node_ids, cols, nodes_per_hop, edges_per_hop, fanouts, indptr,
                     replace, exact):
    """Each node of hop h's frontier got min(degree, fanouts[h]) edges (with
    replacement: fanouts[h] if it has any), and all of them from its own frontier."""
    degree = (indptr[1:] - indptr[:-1]).long()
    node_start = edge_start = 0
    for h, f in enumerate(fanouts):
        n, e = int(nodes_per_hop[h]), int(edges_per_hop[h])
        c = cols[edge_start:edge_start + e] - node_start
        assert e == 0 or (int(c.min()) >= 0 and int(c.max()) < n), h
        got = torch.bincount(c, minlength=n)
        deg = degree[node_ids[node_start:node_start + n]]
        want = picks_per_target(deg, f, replace)
        assert torch.equal(got, want) if exact else bool((got <= want).all()), (h, got, want)
        node_start, edge_start = node_start + n, edge_start + e


def distinct_per_target(cols, picked):
    """Without replacement a target never gets the same edge twice."""
    key = cols.long() * (int(picked.max()) + 1 if picked.numel() else 1) + picked.long()
    assert torch.unique(key).numel() == key.numel()


# A refusal names what it refuses (the argument or its entry), not only its type
NAMES = {"seed_range": r"seeds\[", "seed_dtype": "seeds", "seed_dim": "seeds",
         "fanout": "fanout", "indptr_dtype": "indptr", "ends": "indices|indptr",
         "row_bounds": "indptr", "eid_len": "edge_ids", "huge_replace": "fanout",
         "no_hops": "fanouts", "cache_dtype": "cached_indices", "cache_corrupt": "cache",
         "id_range": r"ids\[", "id_dtype": "ids", "id_dim": "ids", "scalar_table": "table",
         "strided": "table", "tier_dtype": r"tiers\[", "positions": r"positions\[",
         "range": r"(row|col)\[", "lengths": "row|col", "dtypes": "row|col",
         "num_nodes": "num_nodes", "seed_time_len": "seed_time", "no_disjoint": "disjoint",
         "strategy": "temporal_strategy", "sums_dtype": "edge_weight_cumsum",
         "unsorted_time": "edge_time", "sums_alone": "edge_weight_cumsum",
         "weight_len": "edge_weight", "weight_dtype": "edge_weight",
         "weight_zero": "edge_weight", "src_range": r"src\[", "src_dtype": "src",
         "per_src": "per_src", "trials": "max_trials"}


def sample_with_cache(indptr, indices, seeds, fanouts, replace, eid, cache):
    """sample_subgraph through a sampler object that holds a topology cache, run as
    launched."""
    sampler = subgraph_sampler(indptr, indices, eid, fanouts, replace, tuple(cache),
                               capture=False)
    return sampler.sample_subgraph(seeds, None)


def placed(t, mode, role):
    """Where `role` (topology, ids, table) lives in `mode`."""
    if mode == "CPU" or t is None:
        return t
    if role == "ids":
        return t.cuda()
    return t.cuda() if mode == "GPU" else t.pin_memory()


def random_csr(rng, num_nodes, num_edges, dtype):
    row = torch.tensor([rng.randrange(num_nodes) for _ in range(num_edges)], dtype=torch.long)
    col = torch.tensor([rng.randrange(num_nodes) for _ in range(num_edges)], dtype=torch.long)
    indptr, indices, eid = csr_reference(row, col, num_nodes)
    return indptr, indices.to(dtype), eid


def random_ids(rng, count, limit, dtype):
    return torch.tensor([rng.randrange(limit) for _ in range(count)], dtype=torch.long).to(dtype)


def fault(rng, faults):
    """Picks no fault most of the time, else one of `faults`."""
    return None if rng.random() < 0.4 else rng.choice(faults)


def sample_case(rng, mode, multi_hop):
    num_nodes = rng.randint(1, 40)
    num_edges = rng.randint(0, 150)
    dtype = rng.choice([torch.int32, torch.int64])
    indptr, indices, eid = random_csr(rng, num_nodes, num_edges, dtype)
    seeds = random_ids(rng, rng.randint(0, 12), num_nodes, rng.choice([torch.int32, torch.int64]))
    replace = rng.random() < 0.3
    # 10**9 without replacement means "all"; with replacement it is a real (and legal)
    # request for 10**9 picks per node, too large to fuzz with.
    choices = [-1, 0, 1, 3, 7, 40] + ([] if replace else [10**9])
    fanouts = [rng.choice(choices) for _ in range(rng.randint(1, 3))]
    use_eid = rng.random() < 0.5
    must_raise = None
    kind = fault(rng, ["seed_range", "seed_dtype", "seed_dim", "fanout", "indptr_dtype",
                       "ends", "row_bounds", "eid_len", "huge_replace", "no_hops",
                       "cache_dtype", "cache_corrupt"])
    # Multi-hop calls read a topology cache a third of the time (always when a cache fault
    # is drawn): every list or some, in GPU memory on a GPU.
    cached = multi_hop and (rng.random() < 0.33 or kind in ("cache_dtype", "cache_corrupt"))
    if kind == "seed_range" and seeds.numel():
        seeds = seeds.long()
        seeds[rng.randrange(seeds.numel())] = rng.choice([-1, num_nodes, 2**40])
        must_raise = IndexError
    elif kind == "seed_dtype":
        seeds, must_raise = seeds.float(), TypeError
    elif kind == "seed_dim":
        seeds, must_raise = seeds.view(1, -1), ValueError
    elif kind == "fanout":
        fanouts[rng.randrange(len(fanouts)) if multi_hop else 0] = rng.choice([-2, -7, -(2**40)])
        must_raise = ValueError
    elif kind == "indptr_dtype":
        indptr, must_raise = indptr.int(), TypeError
    elif kind == "ends" and num_edges:
        # An empty batch reads no row: the CUDA op returns before looking at the CSR.
        indices, must_raise = indices[:-1], ValueError if seeds.numel() else None
    elif kind == "row_bounds" and seeds.numel():
        node = int(seeds[0])
        indptr = indptr.clone()
        indptr[node + 1] = num_edges + 5 if node + 1 < num_nodes else indptr[node + 1]
        indptr[node] = -3 if node > 0 else indptr[node]
        must_raise = ValueError if 0 < node < num_nodes - 1 else None
    elif kind == "eid_len" and num_edges:
        eid, use_eid, must_raise = eid[1:], True, ValueError
    elif kind == "huge_replace":
        fanouts[0], replace, must_raise = 2**62, True, ValueError
    elif kind == "no_hops" and multi_hop:
        fanouts, must_raise = [], ValueError
    args_eid = placed(eid, mode, "topology") if use_eid else None
    topology = (placed(indptr, mode, "topology"), placed(indices, mode, "topology"))
    seeds_placed = placed(seeds, mode, "ids")
    cache = ()
    if cached and kind not in ("indptr_dtype", "ends", "row_bounds"):
        budget = 4 * num_nodes + rng.choice([0, num_edges // 2, num_edges]) * indices.element_size()
        order = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(rng.randrange(99)))
        cache = qv.topology.build_topology_cache(
            *topology, order, budget, seeds_placed.device if mode != "CPU" else "cpu")
        if kind == "cache_dtype":
            cache, must_raise = (cache[0].to(torch.int64 if dtype == torch.int32 else torch.int32),
                                 cache[1]), TypeError
        elif kind == "cache_corrupt" and seeds.numel() and mode != "CPU":
            # The GPU reads the cache and must report a start past its end; the CPU reads
            # indices and has nothing to report.
            node = int(seeds[0])
            if indptr[node + 1] > indptr[node]:
                starts = cache[1].clone()
                starts[node] = cache[0].numel()
                cache, must_raise = (cache[0], starts), ValueError
    if multi_hop:
        def check(out):
            node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop = (t.cpu() for t in out)
            assert torch.equal(node_ids[:seeds.numel()], seeds.long())
            assert int(nodes_per_hop.sum()) == node_ids.numel()
            assert rows.numel() == cols.numel() == eids.numel() == int(edges_per_hop.sum())
            if rows.numel():
                pos = eids if not use_eid else torch.argsort(eid)[eids]
                assert torch.equal(indices[pos].long(), node_ids[rows])
                owner = torch.searchsorted(indptr, pos, right=True) - 1
                assert torch.equal(owner, node_ids[cols])
            check_per_target(node_ids, cols, nodes_per_hop, edges_per_hop, fanouts, indptr,
                             replace, exact=True)
            if not replace:
                distinct_per_target(cols, eids)
        if cache:  # a topology cache is an option of a sampler object, not of the op
            return Case(sample_with_cache, (*topology, seeds_placed, fanouts, replace, args_eid,
                                            cache), must_raise, check, kind or "valid")
        return Case(qv.ops.sample_subgraph,
                    (*topology, seeds_placed, fanouts, replace, args_eid, None),
                    must_raise, check, kind or "valid")

    def check(out):
        counts, neighbors, picked = (t.cpu() for t in out)
        degree = (indptr[1:] - indptr[:-1])[seeds.long()]
        fanout = fanouts[0]
        want = picks_per_target(degree, fanout, replace)
        assert torch.equal(counts, want)
        pos = picked if not use_eid else torch.argsort(eid)[picked]
        assert torch.equal(indices[pos].long(), neighbors)
        if not replace:
            distinct_per_target(torch.repeat_interleave(torch.arange(counts.numel()), counts),
                                picked)
    return Case(qv.ops.sample_neighbors, (*topology, seeds_placed, fanouts[0], replace, args_eid),
                must_raise, check, kind or "valid")


def gather_case(rng, mode, tiered):
    rows = rng.randint(0, 30)
    width = rng.choice([1, 3, 16])
    dtype = rng.choice([torch.float32, torch.float16, torch.int64, torch.uint8])
    table = (torch.randn(rows, width) * 20).to(dtype)
    ids = random_ids(rng, rng.randint(0, 20), max(rows, 1), rng.choice([torch.int32, torch.int64]))
    if rows == 0:
        ids = ids[:0]
    must_raise = None
    kind = fault(rng, ["id_range", "id_dtype", "id_dim", "scalar_table", "strided",
                       "tier_dtype", "positions"])
    positions = None
    if tiered:
        order = torch.randperm(rows, generator=torch.Generator().manual_seed(rng.randrange(99)))
        positions = torch.empty(rows, dtype=torch.long)
        positions[order] = torch.arange(rows)
        cut = rng.randint(0, rows)
        tiers = [table[order][:cut].contiguous(), table[order][cut:].contiguous()]
    if kind == "id_range" and ids.numel():
        ids = ids.long()
        ids[rng.randrange(ids.numel())] = rng.choice([-1, rows, 2**40])
        must_raise = IndexError
    elif kind == "id_dtype":
        ids, must_raise = ids.double(), TypeError
    elif kind == "id_dim":
        ids, must_raise = ids.view(1, -1), ValueError
    elif kind == "scalar_table" and not tiered:
        table, must_raise = torch.tensor(1.0), ValueError
    elif kind == "strided" and width > 1 and rows > 1 and not tiered:
        table, must_raise = table.t(), ValueError
    elif kind == "tier_dtype" and tiered:
        tiers[1], must_raise = tiers[1].double() if dtype != torch.float64 else tiers[1].int(), TypeError
    elif kind == "positions" and tiered and rows and ids.numel():
        positions = positions.clone()
        positions[int(ids[0])] = rows + rng.randrange(5)
        must_raise = IndexError
    expected = None if must_raise else table[ids.long()]

    def check(out):
        assert torch.equal(out.cpu(), expected)
    if tiered:
        placed_tiers = [placed(t, mode, "table") for t in tiers]
        return Case(qv.ops.gather_tiered_rows,
                    (placed_tiers, placed(positions, mode, "ids"), placed(ids, mode, "ids")),
                    must_raise, check, kind or "valid")
    return Case(qv.ops.gather_rows, (placed(table, mode, "table"), placed(ids, mode, "ids")),
                must_raise, check, kind or "valid")


def csr_case(rng, mode):
    num_nodes = rng.randint(0, 30)
    count = rng.randint(0, 60) if num_nodes else 0
    dtype = rng.choice([torch.int32, torch.int64])
    row = random_ids(rng, count, max(num_nodes, 1), dtype)
    col = random_ids(rng, count, max(num_nodes, 1), dtype)
    must_raise = None
    kind = fault(rng, ["range", "lengths", "dtypes", "num_nodes"])
    if kind == "range" and count:
        col = col.long()
        row = row.long()
        col[rng.randrange(count)] = rng.choice([-1, num_nodes])
        must_raise = IndexError
    elif kind == "lengths" and count:
        row, must_raise = row[1:], ValueError
    elif kind == "dtypes":
        row, col, must_raise = row.float(), col.float(), TypeError
    elif kind == "num_nodes":
        num_nodes, must_raise = -1, ValueError

    def check(out):
        indptr, indices, eid = (t.cpu() for t in out)
        ref = csr_reference(row.long(), col.long(), num_nodes)
        assert torch.equal(indptr, ref[0]) and torch.equal(indices.long(), ref[1])
        assert torch.equal(eid, ref[2])
    return Case(qv.ops.csr_from_coo, (placed(row, mode, "ids"), placed(col, mode, "ids"), num_nodes),
                must_raise, check, kind or "valid")


def neighbor_case(rng, mode):
    """quiver::neighbor_sample with random rules: weights (and their prefix sums), times,
    disjoint trees, and their faults."""
    num_nodes = rng.randint(1, 30)
    num_edges = rng.randint(0, 150)
    indptr, indices, eid = random_csr(rng, num_nodes, num_edges, rng.choice([torch.int32,
                                                                            torch.int64]))
    seeds = random_ids(rng, rng.randint(0, 10), num_nodes, torch.int64)
    replace = rng.random() < 0.25
    fanouts = [rng.choice([-1, 0, 1, 3, 40]) for _ in range(rng.randint(1, 3))]
    weight = torch.rand(num_edges) + 0.05 if rng.random() < 0.5 else None
    sums = qv.ops.row_cumsum(indptr, weight) if weight is not None and rng.random() < 0.5 \
        else None
    temporal = rng.random() < 0.5
    times = seed_time = None
    if temporal:
        # Random times sorted within each row (the op's only demand on them).
        _, _, times = qv.ops.sort_rows_by_time(indptr, indices, edge_time=torch.tensor(
            [rng.randrange(20) for _ in range(num_edges)], dtype=torch.long))
        seed_time = torch.tensor([rng.randrange(25) for _ in range(seeds.numel())],
                                 dtype=torch.long)
    strategy = "last" if temporal and not replace and weight is None and rng.random() < 0.5 \
        else "uniform"
    disjoint = temporal or rng.random() < 0.3
    must_raise = None
    kind = fault(rng, ["seed_range", "weight_len", "weight_dtype", "weight_zero",
                       "seed_time_len", "no_disjoint", "strategy", "sums_dtype",
                       "unsorted_time", "sums_alone"])
    if kind == "seed_range" and seeds.numel():
        seeds[rng.randrange(seeds.numel())] = rng.choice([-1, num_nodes])
        must_raise = IndexError
    elif kind == "weight_len":
        weight, sums, must_raise = torch.ones(num_edges + 1), None, ValueError
        strategy = "uniform"  # ('last' with weights is refused for itself)
    elif kind == "weight_dtype":
        weight, sums, must_raise = torch.ones(num_edges, dtype=torch.float64), None, TypeError
        strategy = "uniform"
    elif kind == "weight_zero" and num_edges:
        weight, sums = torch.zeros(num_edges), None  # raises when a visited row has edges
        strategy = "uniform"
    elif kind == "seed_time_len" and temporal:
        seed_time, must_raise = torch.zeros(seeds.numel() + 1, dtype=torch.long), ValueError
    elif kind == "no_disjoint" and temporal:
        disjoint, must_raise = False, ValueError
    elif kind == "strategy":
        strategy, must_raise = "newest", ValueError
    elif kind == "sums_dtype" and sums is not None:
        sums, must_raise = sums.float(), TypeError
    elif kind == "unsorted_time" and temporal and num_edges > 1:
        times = times.flip(0)  # may break the rule: then ValueError, else a valid result
    elif kind == "sums_alone":
        weight, sums, must_raise = None, torch.ones(num_edges, dtype=torch.float64), ValueError
    args = (placed(indptr, mode, "topology"), placed(indices, mode, "topology"),
            placed(seeds, mode, "ids"), fanouts, replace, placed(eid, mode, "topology"),
            placed(weight, mode, "topology"), placed(times, mode, "topology"),
            placed(seed_time, mode, "ids"), False, strategy, disjoint, None,
            placed(sums, mode, "topology"))

    def check(out):
        node_ids, batch, rows, cols, eids, nodes_per_hop, edges_per_hop = (t.cpu() for t in out)
        assert torch.equal(node_ids[:seeds.numel()], seeds)
        assert int(nodes_per_hop.sum()) == node_ids.numel()
        assert rows.numel() == cols.numel() == eids.numel() == int(edges_per_hop.sum())
        if not rows.numel():
            return
        pos = torch.argsort(eid)[eids]
        assert torch.equal(indices[pos].long(), node_ids[rows])
        owner = torch.searchsorted(indptr, pos, right=True) - 1
        assert torch.equal(owner, node_ids[cols])
        if disjoint:
            assert torch.equal(batch[rows], batch[cols])
        if temporal:
            assert bool((times[pos] <= seed_time[batch[cols]]).all())
        check_per_target(node_ids, cols, nodes_per_hop, edges_per_hop, fanouts, indptr,
                         replace, exact=not temporal)
    return Case(qv.ops.neighbor_sample, args, must_raise, check, kind or "valid")


def negatives_case(rng, mode):
    num_nodes = rng.randint(1, 30)
    num_edges = rng.randint(0, 100)
    indptr, indices, _ = random_csr(rng, num_nodes, num_edges, rng.choice([torch.int32,
                                                                          torch.int64]))
    src = random_ids(rng, rng.randint(0, 10), num_nodes, torch.int64)
    per_src = rng.randint(0, 4)
    must_raise = None
    kind = fault(rng, ["src_range", "src_dtype", "per_src", "trials"])
    trials = 8
    if kind == "src_range" and src.numel() and per_src:
        src[rng.randrange(src.numel())] = rng.choice([-1, num_nodes])
        must_raise = IndexError
    elif kind == "src_dtype":
        src, must_raise = src.float(), TypeError
    elif kind == "per_src":
        per_src, must_raise = -1, ValueError
    elif kind == "trials":
        trials, must_raise = 0, ValueError

    def check(out):
        out = out.cpu()
        assert out.numel() == src.numel() * per_src
        assert out.numel() == 0 or (int(out.min()) >= 0 and int(out.max()) < num_nodes)
        if exclude:  # a source linked to <= 10% of the nodes never draws a true edge
            rows = torch.repeat_interleave(torch.arange(num_nodes), indptr[1:] - indptr[:-1])
            for i, s in enumerate(src.tolist()):  # with probability <= 1e-8 a draw
                linked = set(rows[indices.long() == s].tolist())
                if len(linked) <= 0.1 * num_nodes:
                    drawn = out[i * per_src:(i + 1) * per_src].tolist()
                    assert not linked & set(drawn), (s, linked, drawn)
    exclude = rng.random() < 0.7
    return Case(qv.ops.sample_negatives,
                (placed(indptr, mode, "topology"), placed(indices, mode, "topology"),
                 placed(src, mode, "ids"), per_src, exclude, trials),
                must_raise, check, kind or "valid")


def draw(rng, mode):
    pick = rng.randrange(7)
    if pick == 5:
        return neighbor_case(rng, mode)
    if pick == 6:
        return negatives_case(rng, mode)
    if pick == 0:
        return sample_case(rng, mode, multi_hop=False)
    if pick == 1:
        return sample_case(rng, mode, multi_hop=True)
    if pick == 2:
        return gather_case(rng, mode, tiered=False)
    if pick == 3:
        return gather_case(rng, mode, tiered=True)
    return csr_case(rng, mode)


# Faults that raise only where a call meets them (a visited row's zero weight, times out
# of order within the seed's time, a corrupt bound of a row the batch reads): other calls
# with them return.
MAY_RAISE = {"ends", "row_bounds", "weight_zero", "unsorted_time"}


def test_random_and_malformed_calls(mode):
    rng = random.Random(20261122 + len(mode))
    counts = {"returned": 0, "raised": 0}
    returned_by_op = {}
    for case_index in range(CASES[mode]):
        case = draw(rng, mode)
        where = f"case {case_index} ({case.op.__name__}, {case.note}, mode {mode})"
        try:
            out = case.op(*case.args)
        except CLEAR_ERRORS as error:
            assert str(error).strip(), f"{where}: an exception without a message"
            if case.note in NAMES:
                assert re.search(NAMES[case.note], str(error)), f"{where}: {error}"
            if case.note in MAY_RAISE:
                assert isinstance(error, ValueError), f"{where}: {type(error).__name__}"
            if case.must_raise is not None:
                assert isinstance(error, case.must_raise), f"{where}: {type(error).__name__}: {error}"
            else:  # only a fault that may go unseen may raise; a valid call must return
                assert case.note in MAY_RAISE, f"{where}: raised {type(error).__name__}: {error}"
            counts["raised"] += 1
        else:
            assert case.must_raise is None, f"{where}: expected {case.must_raise.__name__}"
            case.check(out)
            counts["returned"] += 1
            returned_by_op[case.op.__name__] = returned_by_op.get(case.op.__name__, 0) + 1
        if mode != "CPU" and case_index % 100 == 99:  # the context still works
            assert int(torch.arange(10, device="cuda").sum()) == 45, where
    assert counts["returned"] > CASES[mode] // 4 and counts["raised"] > CASES[mode] // 4, counts
    # Every op returned often (an op failing on its valid calls cannot hide in the total).
    assert min(returned_by_op.values()) > CASES[mode] // 100 and len(returned_by_op) >= 6, \
        returned_by_op
    if mode != "CPU":
        torch.cuda.synchronize()
