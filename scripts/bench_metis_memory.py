"""Peak memory and time of METIS partitioning (assign_owners(method="metis")) above the
input, per input edge and per entry of the symmetrized adjacency METIS is given: the
measurement behind partition.METIS_BYTES_PER_ENTRY.

    python scripts/bench_metis_memory.py [--graph medium | --random-directed 16000000] [--parts 2]

Linux only: the peak is VmHWM of /proc/self/status, reset (clear_refs 5) after the graph is
built, so it counts what partitioning adds.
"""
import argparse
import time

import torch

import torch_quiver_ops as qv
from torch_quiver_ops import _cli
from torch_quiver_ops.partition import assign_owners
from torch_quiver_ops.synthetic import synthetic_graph


def status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split(field + ":")[1].split()[0]) * 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", default="medium")
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--random-directed", type=int, default=None, metavar="EDGES",
                        help="instead of --graph, EDGES random directed edges over EDGES/10 "
                             "nodes (their symmetrized adjacency has about twice the entries)")
    args = parser.parse_args()
    _cli.check_args(parser, args, {"parts": 1, "random_directed": 10}, ["graph"])
    if args.random_directed:
        nodes = args.random_directed // 10
        edges = torch.randint(0, nodes, (2, args.random_directed),
                              generator=torch.Generator().manual_seed(0))
        topo = qv.CSRTopo(edges, num_nodes=nodes)
        args.graph = f"random directed ({nodes:,} nodes)"
        del edges
    else:
        graph = synthetic_graph(args.graph, seed=0, features=False)
        topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
        del graph
    before = status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident set starts again from here
    start = time.perf_counter()
    assign_owners(topo, args.parts, "metis")
    seconds = time.perf_counter() - start
    above = status_bytes("VmHWM") - before
    row = torch.repeat_interleave(torch.arange(topo.node_count), topo.degree.long())
    col = topo.indices.long()
    keep = row != col
    entries = torch.unique(torch.cat([row[keep] * topo.node_count + col[keep],
                                      col[keep] * topo.node_count + row[keep]])).numel()
    print(f"{args.graph}: {topo.edge_count:,} edges ({entries:,} adjacency entries), "
          f"{args.parts} parts: {seconds:.1f} s, {above / 2**30:.2f} GiB above the input, "
          f"{above / topo.edge_count:.0f} bytes an edge, {above / entries:.0f} an entry")


if __name__ == "__main__":
    main()
