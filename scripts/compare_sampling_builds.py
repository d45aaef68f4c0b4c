"""Whether two builds sample the same batches bit for bit: samples a fixed set of batches
(the op with four fanout lists, GraphSageSampler in GPU and UVA modes through launched,
captured and replayed calls, disjoint trees) on the products-like graph with the build that
TORCH_QUIVER_OPS_LIBRARY and PYTHONPATH name, saves them with the graph itself, and with a
second file compares against a saved set. REPEATS=n samples everything n more times in the
same process and counts outputs that differ (races).

    python scripts/compare_sampling_builds.py before.pt              # with the build before
    REPEATS=2 python scripts/compare_sampling_builds.py after.pt before.pt
"""
import os, sys, torch
import torch_quiver_ops as qv
import argparse
from torch_quiver_ops import ops
from torch_quiver_ops.synthetic import synthetic_graph

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("out", help="where this build's batches are saved")
parser.add_argument("reference", nargs="?", help="a saved set to compare them with")
parser.parse_args()
if not (torch.cuda.is_available() and qv.cuda_kernels_built()):
    parser.error("this script samples on the GPU: it needs a CUDA GPU and the CUDA kernels")

dev = torch.device("cuda", 0)
g = synthetic_graph("products", device=dev, csr=True)
topo = g.topology()
train = g.train_idx.cpu()
gen = torch.Generator().manual_seed(0)
batches = [train[torch.randperm(train.numel(), generator=gen)[:1024]] for _ in range(6)]
batches.append(batches[0][:37])


def sample_all():
    outs = {}
    indptr, indices = topo.indptr.to(dev), topo.indices.to(dev)
    for fan, rep in (([15, 10, 5], False), ([40, 3], False), ([10, 5], True), ([-1, 3], False)):
        torch.manual_seed(7)
        outs[f"op{fan}{rep}"] = [ops.sample_subgraph(indptr, indices, b.to(dev), fan, rep)
                                 for b in batches]
    for mode in ("GPU", "UVA"):
        s = qv.GraphSageSampler(topo, [15, 10, 5], device=dev, mode=mode)
        torch.manual_seed(8)
        outs[f"sampler{mode}"] = [s.sample_subgraph(b) for b in batches + batches]
    s = qv.GraphSageSampler(topo, [10, 5], device=dev, mode="GPU", disjoint=True)
    torch.manual_seed(9)
    outs["disjoint"] = [s.neighbor_sample(b[:64]) for b in batches]
    return outs



def differing(ref, outs):
    """(key, batch, output, first, second) for every output that differs."""
    for key in ref:
        for i, (a, b) in enumerate(zip(ref[key], outs[key])):
            for j, (x, y) in enumerate(zip(a, b)):
                if x.shape != y.shape or not torch.equal(x, y):
                    yield key, i, j, x, y


outs = sample_all()
for rep in range(int(os.environ.get("REPEATS", "0"))):
    diff = sum(1 for _ in differing(outs, sample_all()))
    print("in-process repeat", rep, "differs in", diff, "outputs")
outs = {k: [[t.cpu() for t in o] for o in v] for k, v in outs.items()}
outs["graph"] = [[topo.indptr.cpu(), topo.indices.cpu()] +
                 ([topo.eid.cpu()] if topo.eid is not None else [])]
torch.save(outs, sys.argv[1])
if len(sys.argv) > 2:
    ref = torch.load(sys.argv[2])
    bad = 0
    for k, i, j, x, y in differing(ref, outs):
        bad += 1
        n = (x != y).sum().item() if x.shape == y.shape else -1
        where = (x != y).nonzero()[:3].flatten().tolist() if n > 0 else []
        print("DIFFERENT", k, i, j, x.shape, y.shape, "elements", n, "at", where,
              [x[w].item() for w in where], [y[w].item() for w in where])
    print("compared", sum(len(v) for v in ref.values()), "outputs;", bad, "differ")
