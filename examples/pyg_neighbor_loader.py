"""GraphSAGE with PyG's NeighborLoader, as PyG users write it for ogbn-products, moved onto
torch-quiver-ops' GPU sampler and tiered feature store by changing the lines marked
``# quiver`` (four): the import, the loaders' keyword arguments (the GPU to sample on, the
share of the feature table cached in GPU memory) and a prefetcher that builds the next
batches on a side CUDA stream while the model trains.

    python examples/pyg_neighbor_loader.py                     # small graph, CPU or GPU
    python examples/pyg_neighbor_loader.py --size products     # ogbn-products-sized, GPU

The graph is the project's synthetic one (ogbn-products' sizes, labels that depend on the
neighbourhood), built as a ``torch_geometric.data.Data`` like a PyG dataset's.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv

from torch_quiver_ops.pyg import NeighborLoader, Prefetcher  # quiver: was torch_geometric.loader
from torch_quiver_ops.synthetic import PRESETS, synthetic_graph

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import option_checks  # noqa: E402  (the examples' shared option checks)

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--size", default="small", choices=sorted(PRESETS),
                    help="synthetic graph preset (default: small)")
parser.add_argument("--epochs", type=int, default=4, help="training epochs (default: 4)")
parser.add_argument("--batch-size", type=int, default=1024, help="seed nodes per batch")
parser.add_argument("--num-workers", type=int, default=min(4, os.cpu_count() or 1),
                    help="DataLoader worker processes that collate batches (0: in the main "
                         "process; default: 4, or fewer on a machine with fewer cores)")
parser.add_argument("--seed", type=option_checks.seed, default=0,
                    help="seeds the graph, model and batches")
args = parser.parse_args()
option_checks.at_least(parser, args, ["epochs", "num_workers"], 0)  # before the graph:
option_checks.at_least(parser, args, ["batch_size"], 1)  # DataLoader would refuse it later
option_checks.at_most(parser, args, ["num_workers"], 256)  # each a process
option_checks.at_most(parser, args, ["batch_size"], option_checks.MAX_BATCH_SIZE)
torch.manual_seed(args.seed)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

graph = synthetic_graph(args.size, seed=args.seed)
data = Data(x=graph.x, edge_index=graph.edge_index, y=graph.y, num_nodes=graph.num_nodes)
train_idx, test_idx = graph.train_idx, graph.test_idx[:10_000]

train_loader = NeighborLoader(data, input_nodes=train_idx, num_neighbors=[15, 10, 5],
                              batch_size=args.batch_size, shuffle=True,
                              device=device, cache_size="20%",  # quiver
                              num_workers=args.num_workers,
                              persistent_workers=args.num_workers > 0)
test_loader = NeighborLoader(data, input_nodes=test_idx, num_neighbors=[15, 10, 5],
                             batch_size=args.batch_size,
                             device=device, cache_size="20%",  # quiver
                             num_workers=args.num_workers,
                             persistent_workers=args.num_workers > 0)


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers=3):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        for _ in range(num_layers - 2):
            self.convs.append(SAGEConv(hidden_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.dropout(x.relu(), p=0.5, training=self.training)
        return x


model = SAGE(data.num_features, 256, graph.num_classes).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=0.003)


def train():
    model.train()
    total_loss = total_examples = 0
    for batch in Prefetcher(train_loader, device):  # quiver: was train_loader
        batch = batch.to(device)
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * batch.batch_size
        total_examples += batch.batch_size
    return total_loss / total_examples


@torch.no_grad()
def test():
    model.eval()
    correct = total = 0
    for batch in test_loader:
        batch = batch.to(device)
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        correct += int((out.argmax(-1) == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    return correct / total


def main():
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        loss = train()
        seconds = time.perf_counter() - start
        print(f"Epoch {epoch:02d}, Loss: {loss:.4f}, Time: {seconds:.2f}s, Test: {test():.4f}",
              flush=True)


option_checks.run_main(main)  # a Ctrl-C ends it with one line, as the other examples
