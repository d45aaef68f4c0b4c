"""Seconds a round of making a PyG drop-in loader with persistent workers, iterating it
twice and dropping it take, and whether the loader outlives its last name (a reference
cycle keeps it until a collection, and torch then stops its workers only at a 5 s join
timeout each). CPU only; small random graph.

    python scripts/probe_dropped_loader.py [--rounds 4] [--workers 2] [--context fork]
"""
import argparse
import gc
import time
import weakref


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4, help="loaders made and dropped, each")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers a loader")
    parser.add_argument("--context", default="fork", choices=["fork", "spawn", "forkserver"],
                        help="how workers start")
    args = parser.parse_args()
    if args.rounds < 1 or args.workers < 1:
        parser.error("--rounds and --workers must be >= 1")
    import torch
    from torch_geometric.data import Data
    from torch_quiver_ops.pyg import LinkNeighborLoader, NeighborLoader

    gen = torch.Generator().manual_seed(0)
    n = 500
    data = Data(x=torch.randn(n, 8, generator=gen), y=torch.randint(3, (n,), generator=gen),
                edge_index=torch.randint(n, (2, 4000), generator=gen))
    print(f"{'loader':<8} {'round':>5} {'batches':>8} {'outlived its name':>18} {'seconds':>8}")
    for kind in ("node", "link"):
        for round_ in range(args.rounds):
            start = time.perf_counter()
            options = dict(num_neighbors=[3, 2], batch_size=64, num_workers=args.workers,
                           persistent_workers=True, multiprocessing_context=args.context)
            loader = (NeighborLoader(data, **options) if kind == "node" else
                      LinkNeighborLoader(data, neg_sampling="binary", **options))
            batches = sum(1 for _ in loader) + sum(1 for _ in loader)
            dropped = weakref.ref(loader)
            gc.disable()  # (as between two automatic collections)
            del loader
            outlived = dropped() is not None
            gc.enable()
            print(f"{kind:<8} {round_:>5} {batches:>8} {str(outlived):>18} "
                  f"{time.perf_counter() - start:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
