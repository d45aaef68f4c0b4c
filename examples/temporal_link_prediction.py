"""Temporal link prediction with GraphSAGE: every seed edge sees only the graph as it was
before it appeared, through ``torch_quiver_ops.pyg.LinkNeighborLoader(time_attr=...)``.

    python examples/temporal_link_prediction.py                  # small graph, GPU
    python examples/temporal_link_prediction.py --size tiny --device cpu  # a CPU: minutes
    python examples/temporal_link_prediction.py --size products  # ogbn-products-sized, GPU

Each undirected edge of a synthetic graph gets a timestamp (uniform in [0, 1000), both
directions alike). Edges before --train-until train, the next ones up to --test-from
validate, the rest test; the model's graph holds all of them, because temporal sampling
lets a seed edge at time t reach only edges at or before t - 1 (each seed's tree apart,
PyG's disjoint sampling), so no future edge, and not the seed edge itself, leaks into its
messages. Training uses binary negatives (random non-edges, drawn on the sampling device);
each epoch prints the loss, the test AUC (chance 0.5) and the test MRR of each true
destination among --mrr-negatives random ones (chance about
H(k + 1) / (k + 1), 0.17 for 20).
"""
import argparse
import os
import sys
import time
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.sampler import NegativeSampling

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import option_checks  # noqa: E402
from link_prediction import Encoder, auc  # noqa: E402

import torch_quiver_ops as qv  # noqa: E402
from torch_quiver_ops.pyg import LinkNeighborLoader, Prefetcher  # noqa: E402
from torch_quiver_ops.synthetic import PRESETS, synthetic_graph  # noqa: E402

TIME_SPAN = 1000


def parse_args(argv: Optional[Sequence[str]] = None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", choices=sorted(PRESETS))
    parser.add_argument("--epochs", type=int, default=3, help="default: 3")
    parser.add_argument("--batch-size", type=int, default=1024, help="seed edges per batch")
    parser.add_argument("--num-neighbors", default="10,5",
                        help="neighbors per hop around every endpoint (default: 10,5)")
    parser.add_argument("--temporal-strategy", default="uniform", choices=["uniform", "last"],
                        help="sample uniformly among the past edges, or take the most recent")
    parser.add_argument("--train-until", type=int, default=800,
                        help="edges before this time train (default: 800 of 1000)")
    parser.add_argument("--test-from", type=int, default=900,
                        help="edges from this time test; those between validate (default: 900)")
    parser.add_argument("--train-edges", type=int, default=None,
                        help="seed edges per epoch (default: every training edge)")
    parser.add_argument("--eval-edges", type=int, default=20000,
                        help="validation and test edges scored (default: 20000)")
    parser.add_argument("--mrr-negatives", type=int, default=20,
                        help="negatives each test source is ranked against (default: 20)")
    parser.add_argument("--hidden", type=int, default=128,
                        help="the encoder's hidden width (default: 128)")
    parser.add_argument("--lr", type=float, default=0.003, help="Adam's (default: 0.003)")
    parser.add_argument("--device", default="auto",
                        help="auto (the GPU when there is one), cpu, or a CUDA device")
    parser.add_argument("--seed", type=option_checks.seed, default=0,
                        help="seeds the graph, the model and the batches (default: 0)")
    parser.add_argument("--report", default=None, help="write the history as JSON here")
    args = parser.parse_args(argv)
    # Checked here, before the graph is built, not after an epoch (or a run) has gone by.
    args.num_neighbors = option_checks.fanout_list(parser, args.num_neighbors, "--num-neighbors")
    option_checks.at_least(parser, args, ["epochs"], 0)
    # --train-edges left out (None) takes every one
    option_checks.at_least(parser, args, ["batch_size", "hidden", "train_edges", "eval_edges",
                                          "mrr_negatives"], 1)
    option_checks.at_most(parser, args, ["hidden"], option_checks.MAX_HIDDEN)
    option_checks.positive(parser, args, ["lr"])
    # Each test batch of MRR_BATCH sources draws this many negatives a source: past what the
    # negative sampler takes in one batch, the run failed after its training epochs.
    most = MAX_NEGATIVES_A_BATCH // MRR_BATCH
    if args.mrr_negatives > most:
        parser.error(f"--mrr-negatives must be at most {most:,} (a test batch of {MRR_BATCH} "
                     f"sources draws at most {MAX_NEGATIVES_A_BATCH:,}), got "
                     f"{args.mrr_negatives:,}")
    option_checks.negatives_fit(parser, "--mrr-negatives", args.mrr_negatives,
                                MRR_BATCH * args.mrr_negatives)
    option_checks.negatives_fit(parser, "--batch-size", args.batch_size, args.batch_size)
    # Times are whole numbers in [0, TIME_SPAN): training takes t < --train-until, validation
    # --train-until <= t < --test-from, test t >= --test-from, none of them empty.
    if not 1 <= args.train_until < args.test_from < TIME_SPAN:
        parser.error(f"--train-until and --test-from need 1 <= --train-until < --test-from < "
                     f"{TIME_SPAN} (edge times are whole numbers in [0, {TIME_SPAN}); "
                     f"training takes t < --train-until, validation the times between, test "
                     f"t >= --test-from), got --train-until {args.train_until} and "
                     f"--test-from {args.test_from}")
    option_checks.output_file(parser, "report", args.report)
    option_checks.device_option(parser, args.device, auto=True)
    option_checks.graph_fits(parser, args.size)  # (drawn on the CPU)
    return args


MRR_BATCH = 1024  # test edges a batch when ranking against negatives
# The negative sampler's limit on a batch (kMaxHopEdges, ops/sampling_rules.h).
MAX_NEGATIVES_A_BATCH = 2**32 - 2


def timed_edges(graph, gen):
    """The graph's edges with one timestamp per undirected edge (both directions alike)."""
    edges = graph.edge_index
    low, high = torch.minimum(edges[0], edges[1]), torch.maximum(edges[0], edges[1])
    pair = low * graph.num_nodes + high
    _, which = pair.unique(return_inverse=True)
    times = torch.randint(0, TIME_SPAN, (int(which.max()) + 1,), generator=gen)
    return edges, times[which]


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    use_gpu = option_checks.cuda_usable()
    device = torch.device("cuda" if use_gpu else "cpu") if args.device == "auto" \
        else torch.device(args.device)
    fanouts = args.num_neighbors
    gen = torch.Generator().manual_seed(args.seed)
    graph = synthetic_graph(args.size, seed=args.seed)
    edges, edge_time = timed_edges(graph, gen)
    data = Data(x=graph.x, edge_index=edges, edge_time=edge_time, num_nodes=graph.num_nodes)

    def pick(mask, limit=None):
        ids = mask.nonzero().view(-1)
        if limit is not None and limit < ids.numel():
            ids = ids[torch.randperm(ids.numel(), generator=gen)[:limit]]
        return ids

    train = pick(edge_time < args.train_until, args.train_edges)
    val = pick((edge_time >= args.train_until) & (edge_time < args.test_from), args.eval_edges)
    test = pick(edge_time >= args.test_from, args.eval_edges)
    for split, ids in (("training", train), ("validation", val), ("test", test)):
        if ids.numel() == 0:  # before the first epoch, not after it
            raise SystemExit(f"temporal_link_prediction.py: --train-until {args.train_until} "
                             f"and --test-from {args.test_from} leave no {split} edge among "
                             f"the graph's {edges.size(1):,} timed edges")
    placement = dict(device=device, mode="UVA" if device.type == "cuda" else "CPU",
                     cache_size="20%" if device.type == "cuda" else 0)

    def loader(ids, neg_sampling, shuffle=False, batch_size=None):
        # A seed edge at time t sees the graph up to t - 1: not itself, nothing later.
        return LinkNeighborLoader(data, fanouts, edge_label_index=edges[:, ids],
                                  edge_label_time=edge_time[ids] - 1, time_attr="edge_time",
                                  temporal_strategy=args.temporal_strategy,
                                  neg_sampling=neg_sampling, shuffle=shuffle,
                                  batch_size=batch_size or args.batch_size, **placement)

    def embed(batch):
        return model(batch.x, batch.edge_index)

    model = Encoder(graph.x.size(1), args.hidden).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    @torch.no_grad()
    def evaluate(ids):
        model.eval()
        positive, negative = [], []
        for batch in loader(ids, "binary", batch_size=4096):
            batch = batch.to(device)
            z = embed(batch)
            src, dst = batch.edge_label_index
            out = (z[src] * z[dst]).sum(-1)
            positive.append(out[batch.edge_label == 1])
            negative.append(out[batch.edge_label == 0])
        ranks = []
        triplets = NegativeSampling("triplet", amount=args.mrr_negatives)
        for batch in loader(ids, triplets, batch_size=MRR_BATCH):
            batch = batch.to(device)
            ranks.append(ranks_of(embed(batch), batch))
        mrr = float((1.0 / torch.cat(ranks).double()).mean())
        return auc(torch.cat(positive), torch.cat(negative)), mrr

    print(f"graph {args.size!r}: {graph.num_nodes:,} nodes, {edges.size(1):,} timed edges; "
          f"{train.numel():,} training seeds (t < {args.train_until}), {val.numel():,} "
          f"validation, {test.numel():,} test (t >= {args.test_from}); device {device}; "
          f"temporal strategy {args.temporal_strategy!r}", flush=True)
    history = []
    train_loader = loader(train, "binary", shuffle=True)
    for epoch in range(1, args.epochs + 1):
        model.train()
        start = time.perf_counter()
        total_loss = total = 0.0
        for batch in Prefetcher(train_loader, device):
            batch = batch.to(device)
            optimizer.zero_grad()
            z = embed(batch)
            src, dst = batch.edge_label_index
            loss = F.binary_cross_entropy_with_logits((z[src] * z[dst]).sum(-1),
                                                      batch.edge_label)
            loss.backward()
            optimizer.step()
            total_loss += loss.item() * batch.edge_label.numel()
            total += batch.edge_label.numel()
        seconds = time.perf_counter() - start
        (val_auc, val_mrr), (test_auc, test_mrr) = evaluate(val), evaluate(test)
        history.append({"epoch": epoch, "loss": total_loss / total, "seconds": seconds,
                        "val_auc": val_auc, "val_mrr": val_mrr, "test_auc": test_auc,
                        "test_mrr": test_mrr})
        print(f"epoch {epoch}: {seconds:6.2f}s  loss {total_loss / total:.4f}  test AUC "
              f"{test_auc:.4f} (chance 0.5)  test MRR {test_mrr:.4f} (chance "
              f"{chance_mrr(args.mrr_negatives):.3f})", flush=True)
        option_checks.stop_if_diverged(total_loss / total, epoch, args.lr)
    result = {"history": history, "device": str(device), "size": args.size,
              "chance_mrr": chance_mrr(args.mrr_negatives)}
    if args.report:
        option_checks.write_report(args.report, result)
    return result


def ranks_of(z, batch):
    """Each seed edge's rank among its triplet negatives by dot product (1 = first), a tied
    negative counting half, as OGB's evaluator averages the optimistic and pessimistic
    ranks (and as the AUC counts ties): counted as beaten, a constant model had scored
    1 / (k + 1), far below the chance printed."""
    src = z[batch.src_index]
    pos = (src * z[batch.dst_pos_index]).sum(-1, keepdim=True)
    # PyG squeezes one negative a source to shape [B]: [B, amount] either way.
    neg_index = batch.dst_neg_index.view(src.size(0), -1)
    neg = (src.unsqueeze(1) * z[neg_index]).sum(-1)
    # A NaN score loses to every negative (a NaN compares false, which ranked it first).
    beaten = (neg > pos) | neg.isnan() | pos.isnan()
    tied = neg == pos  # (a NaN equals nothing)
    return 1 + beaten.sum(-1) + 0.5 * tied.sum(-1)


def chance_mrr(negatives: int) -> float:
    """The MRR of random scores: the true destination's rank uniform in 1..k + 1."""
    return sum(1 / r for r in range(1, negatives + 2)) / (negatives + 1)


if __name__ == "__main__":
    option_checks.run_main(main)
