"""Exercises every CUDA kernel on small inputs, for compute-sanitizer (memcheck, racecheck):
sampling with and without replacement, all-neighbor hops, duplicate and zero-degree seeds,
node-table growth at all-neighbor hops (rehash), picks past the shared-memory set, large UVA
hops visited in address order, int32 and int64 ids, GPU and UVA placement, the row gather,
and ids the kernels must reject."""
import torch

import torch_quiver_ops as qv
from torch_quiver_ops.synthetic import synthetic_graph


def must_reject(call, *args):
    """The kernels must report these ids (and the op raise IndexError), never read them."""
    try:
        call(*args)
    except IndexError:
        return
    raise AssertionError(f"{call} accepted an out-of-range id")


def main():
    graph = synthetic_graph("tiny", seed=1)
    topo = qv.CSRTopo(graph.edge_index)
    device = torch.device("cuda")
    seeds = torch.cat([graph.train_idx[:64], graph.train_idx[:8]]).to(device)
    for indices in (topo.indices, topo.indices.long()):
        for mode in ("GPU", "UVA"):
            move = (lambda t: t.to(device)) if mode == "GPU" else (lambda t: t.pin_memory())
            indptr, idx, eid = move(topo.indptr), move(indices), move(topo.eid)
            for replace in (False, True):
                qv.ops.sample_neighbors(indptr, idx, seeds, 5, replace, eid)
                qv.ops.sample_neighbors(indptr, idx, seeds, 40, replace, None)  # > shared picks
                qv.ops.sample_subgraph(indptr, idx, seeds, [10, 5, 3], replace, eid)
                qv.ops.sample_subgraph(indptr, idx, seeds[:4], [-1, 2], replace, None)  # growth
                qv.ops.sample_subgraph(indptr, idx, seeds, [3, -1], replace, eid)  # rehash
                qv.ops.sample_subgraph(indptr, idx, seeds, [40, 2], replace, None)
                # A hop of 2^14 rows or more: over UVA (with the order forced on, as a
                # sampler object allows) its rows are visited in their lists' order.
                ordered = torch.classes.quiver.SubgraphSampler(
                    indptr, idx, eid, [4, 2], replace, None, None, None, None, False,
                    "uniform", False, None, False)
                ordered.set_uva_row_order(1)
                ordered.sample_subgraph(seeds.repeat(300)[:20000], None)
            must_reject(qv.ops.sample_subgraph, indptr, idx,
                        torch.tensor([0, topo.node_count], device=device), [3])
            must_reject(qv.ops.sample_neighbors, indptr, idx,
                        torch.tensor([-1, 0], device=device), 3)
            table = graph.x.to(device) if mode == "GPU" else graph.x.pin_memory()
            qv.ops.gather_rows(table, seeds)
            narrow = table[:, :3].contiguous()
            qv.ops.gather_rows(narrow if mode == "GPU" else narrow.pin_memory(), seeds.int())
    # The tiered gather: HBM tiers (one a single row), the pinned host tier, positions of
    # both widths, rows of 2, 12 and 400 bytes, an id out of range.
    for x in (graph.x, graph.x.half()[:, :1], graph.x[:, :3]):
        hot = torch.randperm(x.size(0))
        cache = 200 * x[0].nbytes
        for order in (None, hot):
            feature = qv.Feature(device_cache_size=cache).from_cpu_tensor(x, hot_order=order)
            feature[seeds]
            feature[seeds.int()]
        tiers = feature.tiers().tiers()
        split = [tiers[0][:1], tiers[0][1:], tiers[1]]
        positions = feature.tiers().positions()
        qv.ops.gather_tiered_rows(split, positions.long(), seeds)
        must_reject(qv.ops.gather_tiered_rows, split, positions,
                    torch.tensor([0, x.size(0)], device=device))
        # Staged host rows: the split, the bounded gather and the scatter (a batch large
        # enough to be staged, rows from every tier).
        many = torch.randint(x.size(0), (20_000,), device=device)
        staged = torch.classes.quiver.FeatureTiers(split, positions.long())
        staged.set_stage_host_rows(True)
        for _ in range(3):  # the split moves between calls
            staged.gather(many)
        bad = many.clone()
        bad[7] = x.size(0)
        must_reject(staged.gather, bad)
    torch.cuda.synchronize()
    print("sanitizer workload done")


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args()
    if not (torch.cuda.is_available() and qv.cuda_kernels_built()):
        parser.error("this script runs the CUDA kernels (under compute-sanitizer): it needs a "
                     "CUDA GPU and the CUDA kernels")
    main()
