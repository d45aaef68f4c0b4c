"""Fake (meta) kernels: output shapes and dtypes of every op, for torch.compile and
torch.export. Sizes that depend on the data are fresh symbolic sizes. And the fake classes of
the runtime classes a model may hold (FeatureTiers, ShardMap, DistFeature, Transport), so
that export traces models that hold them: each is rebuilt from its class's __obj_flatten__
(runtime/classes.cpp), and answers its methods with fake tensors."""
import torch


@torch.library.register_fake("quiver::check_csr")
def _check_csr_fake(indptr, indices, edge_ids=None, num_nodes=-1):
    return None  # a scan of the values: nothing to trace


@torch.library.register_fake("quiver::check_permutation")
def _check_permutation_fake(order, num_rows, what):
    return None  # a scan of the values: nothing to trace


@torch.library.register_fake("quiver::check_fanouts")
def _check_fanouts_fake(fanouts, replace, what="fanouts"):
    return None


@torch.library.register_fake("quiver::csr_from_coo")
def _csr_from_coo_fake(row, col, num_nodes):
    _no_meta_beside_real(row=row, col=col)
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


@torch.library.register_fake("quiver::neighbor_sample")
def _neighbor_sample_fake(indptr, indices, seeds, fanouts, replace=False, edge_ids=None,
                          edge_weight=None, edge_time=None, seed_time=None, strict_time=False,
                          temporal_strategy="uniform", disjoint=False, generator=None,
                          edge_weight_cumsum=None):
    ctx = torch.library.get_ctx()
    num_nodes = ctx.new_dynamic_size()
    num_edges = ctx.new_dynamic_size()
    node_ids = seeds.new_empty(num_nodes, dtype=torch.long)
    batch = seeds.new_empty(num_nodes if disjoint else 0, dtype=torch.long)
    rows = seeds.new_empty(num_edges, dtype=torch.long)
    cols = seeds.new_empty(num_edges, dtype=torch.long)
    eids = seeds.new_empty(num_edges, dtype=torch.long)
    nodes_per_hop = torch.empty(len(fanouts) + 1, dtype=torch.long, device="cpu")
    edges_per_hop = torch.empty(len(fanouts), dtype=torch.long, device="cpu")
    return node_ids, batch, rows, cols, eids, nodes_per_hop, edges_per_hop


@torch.library.register_fake("quiver::hetero_neighbor_sample")
def _hetero_neighbor_sample_fake(indptr, indices, edge_ids, seeds, node_type_offsets,
                                 relation_src_types, relation_dst_types, relation_edge_offsets,
                                 fanouts, replace=False, edge_weight=None, edge_time=None,
                                 seed_time=None, strict_time=False, temporal_strategy="uniform",
                                 disjoint=False, generator=None, edge_weight_cumsum=None):
    ctx = torch.library.get_ctx()
    num_nodes = ctx.new_dynamic_size()
    num_edges = ctx.new_dynamic_size()
    num_types = len(node_type_offsets) - 1
    num_relations = len(relation_dst_types)
    num_hops = len(fanouts) // max(num_relations, 1)
    node_ids = seeds.new_empty(num_nodes, dtype=torch.long)
    batch = seeds.new_empty(num_nodes if disjoint else 0, dtype=torch.long)
    rows = seeds.new_empty(num_edges, dtype=torch.long)
    cols = seeds.new_empty(num_edges, dtype=torch.long)
    eids = seeds.new_empty(num_edges, dtype=torch.long)
    nodes_per_type_hop = torch.empty(num_types, num_hops + 1, dtype=torch.long, device="cpu")
    edges_per_relation_hop = torch.empty(num_relations, num_hops, dtype=torch.long, device="cpu")
    return node_ids, batch, rows, cols, eids, nodes_per_type_hop, edges_per_relation_hop


@torch.library.register_fake("quiver::sample_negatives")
def _sample_negatives_fake(indptr, indices, src, per_src, exclude_edges=True, max_trials=8,
                           out_rows=False, generator=None, dst_begin=0, dst_count=-1):
    _no_meta_beside_real(indptr=indptr, indices=indices, src=src)
    return src.new_empty(src.shape[0] * per_src, dtype=torch.long)


def _no_meta_beside_real(**tensors) -> None:
    """These kernels also run for a real meta tensor among real ones (the Meta key wins the
    dispatch) and would hand back uninitialized memory: refused, naming the meta ones. A
    fake tensor reports its own device, so tracing never lands here."""
    meta = [name for name, t in tensors.items() if t.device.type == "meta"]
    if meta and len(meta) < len(tensors):
        real = next(t.device for t in tensors.values() if t.device.type != "meta")
        raise ValueError(f"{', '.join(meta)} on the meta device, which holds no data, beside "
                         f"tensors on {real}: give tensors with data")


@torch.library.register_fake("quiver::gather_rows")
def _gather_rows_fake(table, ids):
    _no_meta_beside_real(table=table, ids=ids)
    # Rows land where the ids are (the CUDA op reads a table on a peer GPU or in pinned
    # host memory and writes on the ids' GPU).
    return table.new_empty((ids.shape[0], *table.shape[1:]), device=ids.device)


@torch.library.register_fake("quiver::gather_tiered_rows")
def _gather_tiered_rows_fake(tiers, positions, ids):
    _no_meta_beside_real(ids=ids, **{f"tiers[{k}]": t for k, t in enumerate(tiers)})
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

    def gather(self, ids, host_read_blocks: int = 0):
        return torch.ops.quiver.gather_tiered_rows.default(self._tiers, self._positions, ids)

    def stages_host_rows(self) -> bool:  # how host rows are read changes no shape
        return False

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
        leading = self._tiers if self._tiers[-1].is_cuda else self._tiers[:-1]
        return sum(t.size(0) for t in leading)


@torch._library.register_fake_class("quiver::ShardMap")
class FakeShardMap:
    """ShardMap while export traces: its two tensors (fake) and the host count."""

    def __init__(self, host_of, local_index, num_hosts):
        self._host_of = host_of
        self._local_index = local_index
        self._num_hosts = num_hosts

    @classmethod
    def __obj_unflatten__(cls, flattened):
        return cls(**dict(flattened))

    def locate(self, ids):
        # (owner, local index) of each id, as int64 on the ids' device.
        return [ids.new_empty(ids.shape, dtype=torch.long),
                ids.new_empty(ids.shape, dtype=torch.long)]

    def host_of(self):
        return self._host_of

    def local_index(self):
        return self._local_index

    def num_rows(self) -> int:
        return self._host_of.size(0)

    def num_hosts(self) -> int:
        return self._num_hosts


@torch._library.register_fake_class("quiver::DistFeature")
class FakeDistFeature:
    """DistFeature while export traces: the rows' dtype and shape (a table of no rows) and
    the hosts. The real gather (and its exchange with the other hosts) runs when the
    exported program does."""

    def __init__(self, no_rows, num_rows, host, num_hosts):
        self._no_rows = no_rows
        self._num_rows = num_rows
        self._host = host
        self._num_hosts = num_hosts

    @classmethod
    def __obj_unflatten__(cls, flattened):
        return cls(**dict(flattened))

    def gather(self, ids, host_read_blocks: int = 0):
        return self._no_rows.new_empty((ids.shape[0], *self._no_rows.shape[1:]),
                                       device=ids.device)

    def host(self) -> int:
        return self._host

    def num_hosts(self) -> int:
        return self._num_hosts


@torch._library.register_fake_class("quiver::Transport")
class FakeTransport:
    """Transport while export traces: what it is and which host it serves."""

    def __init__(self, kind, host, num_hosts, collective):
        self._kind = kind
        self._host = host
        self._num_hosts = num_hosts
        self._collective = collective

    @classmethod
    def __obj_unflatten__(cls, flattened):
        return cls(**dict(flattened))

    def kind(self) -> str:
        return self._kind

    def host(self) -> int:
        return self._host

    def num_hosts(self) -> int:
        return self._num_hosts

    def is_collective(self) -> bool:
        return self._collective
