"""A torch-quiver multi-GPU training script, as torch-quiver's own examples are written
(``quiver.CSRTopo``, ``quiver.pyg.GraphSageSampler``, ``quiver.Feature``, ``quiver.init_p2p``,
``share_ipc`` hand-over to ``mp.spawn`` workers, DDP), with its import line changed to
torch-quiver-ops. The other differences from a torch-quiver script: the graph is the
built-in synthetic one (no OGB download in tests), and without GPUs it samples on the CPU
over Gloo (torch-quiver samples on GPUs only).

    python torch_quiver_script.py OUT_JSON [WORLD_SIZE]
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import SAGEConv

import torch_quiver_ops as quiver  # was: import quiver
from torch_quiver_ops.synthetic import synthetic_graph

USE_CUDA = torch.cuda.is_available() and quiver.cuda_kernels_built()


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers):
        super().__init__()
        self.num_layers = num_layers
        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        for _ in range(num_layers - 2):
            self.convs.append(SAGEConv(hidden_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

    def forward(self, x, adjs):
        for i, (edge_index, _, size) in enumerate(adjs):
            x_target = x[:size[1]]  # Target nodes are always placed first.
            x = self.convs[i]((x, x_target), edge_index)
            if i != self.num_layers - 1:
                x = F.relu(x)
                x = F.dropout(x, p=0.5, training=self.training)
        return x.log_softmax(dim=-1)


def run(rank, world_size, quiver_sampler, quiver_feature, y, train_idx, test_idx, num_features,
        num_classes, port, out_path):
    os.environ['MASTER_ADDR'] = 'localhost'
    os.environ['MASTER_PORT'] = str(port)
    dist.init_process_group('nccl' if USE_CUDA else 'gloo', rank=rank, world_size=world_size)
    if USE_CUDA:
        torch.cuda.set_device(rank)
    device = torch.device('cuda', rank) if USE_CUDA else torch.device('cpu')

    quiver_sampler = quiver.pyg.GraphSageSampler.lazy_from_ipc_handle(quiver_sampler)
    quiver_feature = quiver.Feature.new_from_ipc_handle(rank, quiver_feature)

    train_idx = train_idx.split(train_idx.size(0) // world_size)[rank]
    train_loader = torch.utils.data.DataLoader(train_idx, batch_size=16, shuffle=True,
                                               drop_last=True)

    torch.manual_seed(12345)
    model = SAGE(num_features, 64, num_classes, num_layers=2).to(device)
    model = DistributedDataParallel(model, device_ids=[rank] if USE_CUDA else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    y = y.to(device)

    for epoch in range(1, 16):
        model.train()
        for seeds in train_loader:
            n_id, batch_size, adjs = quiver_sampler.sample(seeds)
            adjs = [adj.to(device) for adj in adjs]
            optimizer.zero_grad()
            out = model(quiver_feature[n_id], adjs)
            loss = F.nll_loss(out, y[n_id[:batch_size]])
            loss.backward()
            optimizer.step()
        dist.barrier()

    if rank == 0:
        model.eval()
        correct = 0
        with torch.no_grad():
            for seeds in test_idx.split(256):
                n_id, batch_size, adjs = quiver_sampler.sample(seeds)
                out = model.module(quiver_feature[n_id], [adj.to(device) for adj in adjs])
                correct += int((out.argmax(-1) == y[n_id[:batch_size]]).sum())
        with open(out_path, 'w') as f:
            json.dump({'test_accuracy': correct / test_idx.numel(), 'world_size': world_size,
                       'num_classes': num_classes, 'sampler_mode': quiver_sampler.mode}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == '__main__':
    out_path = sys.argv[1]
    world_size = int(sys.argv[2]) if len(sys.argv) > 2 else (
        torch.cuda.device_count() if USE_CUDA else 2)
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 29533
    graph = synthetic_graph('tiny', seed=0)

    ##############################
    # Create Sampler And Feature
    ##############################
    csr_topo = quiver.CSRTopo(graph.edge_index)
    if USE_CUDA:
        quiver.init_p2p(device_list=list(range(world_size)))
        quiver_sampler = quiver.pyg.GraphSageSampler(csr_topo, [10, 5], 0, mode='UVA')
    else:
        quiver_sampler = quiver.pyg.GraphSageSampler(csr_topo, [10, 5], 'cpu', mode='CPU')
    quiver_feature = quiver.Feature(rank=0, device_list=list(range(world_size)),
                                    device_cache_size="20K", cache_policy="device_replicate",
                                    csr_topo=csr_topo)
    quiver_feature.from_cpu_tensor(graph.x)

    mp.spawn(
        run,
        args=(world_size, quiver_sampler.share_ipc(), quiver_feature.share_ipc(), graph.y,
              graph.train_idx, graph.test_idx, graph.x.size(1), graph.num_classes, port,
              out_path),
        nprocs=world_size,
        join=True
    )
