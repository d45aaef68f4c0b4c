"""Fake (meta) kernels: output shapes and dtypes of every op, for torch.compile and
torch.export. Sizes that depend on the data are fresh symbolic sizes. And the fake class of
FeatureTiers, so that export traces models that hold one."""
import torch


@torch.library.register_fake("quiver::csr_from_coo")
def _csr_from_coo_fake(row, col, num_nodes):
    indptr = row.new_empty(num_nodes + 1, dtype=torch.long)
    return indptr, col.new_empty(col.shape), row.new_empty(row.shape, dtype=torch.long)


@torch.library.register_fake("quiver::sample_neighbors")
def _sample_neighbors_fake(indptr, indices, seeds, fanout, replace=False, edge_ids=None,
                           generator=None):
    total = torch.library.get_ctx().new_dynamic_size()
    counts = seeds.new_empty(seeds.shape, dtype=torch.long)
    return counts, seeds.new_empty(total, dtype=torch.long), seeds.new_empty(total, dtype=torch.long)


@torch.library.register_fake("quiver::sample_subgraph")
def _sample_subgraph_fake(indptr, indices, seeds, fanouts, replace=False, edge_ids=None,
                          generator=None):
    ctx = torch.library.get_ctx()
    num_nodes = ctx.new_dynamic_size()
    num_edges = ctx.new_dynamic_size()
    node_ids = seeds.new_empty(num_nodes, dtype=torch.long)
    rows = seeds.new_empty(num_edges, dtype=torch.long)
    cols = seeds.new_empty(num_edges, dtype=torch.long)
    eids = seeds.new_empty(num_edges, dtype=torch.long)
    nodes_per_hop = torch.empty(len(fanouts) + 1, dtype=torch.long, device="cpu")
    edges_per_hop = torch.empty(len(fanouts), dtype=torch.long, device="cpu")
    return node_ids, rows, cols, eids, nodes_per_hop, edges_per_hop


@torch.library.register_fake("quiver::gather_rows")
def _gather_rows_fake(table, ids):
    # Rows land where the ids are (the CUDA op reads a table on a peer GPU or in pinned
    # host memory and writes on the ids' GPU).
    return table.new_empty((ids.shape[0], *table.shape[1:]), device=ids.device)


@torch.library.register_fake("quiver::gather_tiered_rows")
def _gather_tiered_rows_fake(tiers, positions, ids, group_host_reads=True):
    return tiers[0].new_empty((ids.shape[0], *tiers[0].shape[1:]), device=ids.device)


@torch._library.register_fake_class("quiver::FeatureTiers")
class FakeFeatureTiers:
    """FeatureTiers while torch.export traces a model that holds one: its tensors (fake),
    and gather as the op it runs."""

    def __init__(self, tiers, positions):
        self._tiers = list(tiers)
        self._positions = positions

    @classmethod
    def __obj_unflatten__(cls, flattened):
        return cls(**dict(flattened))

    def gather(self, ids):
        return torch.ops.quiver.gather_tiered_rows.default(self._tiers, self._positions, ids, True)

    def tiers(self):
        return self._tiers

    def positions(self):
        return self._positions

    def num_rows(self) -> int:  # ids the table answers
        if self._positions is not None:
            return self._positions.size(0)
        return sum(t.size(0) for t in self._tiers)

    def shape(self):
        return [self.num_rows(), *self._tiers[0].shape[1:]]

    def leading_rows(self) -> int:
        return sum(t.size(0) for t in self._tiers[:-1])
