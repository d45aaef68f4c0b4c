"""Fake (meta) kernels: output shapes and dtypes of every op, for torch.compile and
torch.export. Sizes that depend on the data are fresh symbolic sizes. And the fake classes of
the runtime classes a model may hold (FeatureTiers, ShardMap, DistFeature, Transport), so
that export traces models that hold them: each is rebuilt from its class's __obj_flatten__
(runtime/classes.cpp), and answers its methods with fake tensors."""
import torch

# The kernels' checks of what a fake tensor also has (dims, id dtypes, the counts that size
# the outputs), with their sentences and types (ops/checks.h): a bad call then fails while
# it is traced, as it would eagerly, not with an unrelated error from building the outputs
# (an IndexError for 0-d ids, a negative dimension). Checks of values, and of the optional
# arguments that size no output (weights, times, tables of types), are left to the
# kernels: under torch.compile they raise when the kernel runs, and an exported program
# traces such a call and raises when it is run.
_IDS = (torch.int32, torch.int64)
MAX_ROW_TIERS = 17  # ops/row_tiers.h
MAX_HOP_EDGES = (1 << 32) - 2  # kMaxHopEdges, ops/sampling_rules.h


def _index_vector(t, name: str) -> None:
    if t.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor, got shape {list(t.shape)}")
    if t.dtype not in _IDS:
        raise TypeError(f"{name} must hold int32 or int64 ids, got {t.dtype}")


def _csr(indptr, indices, edge_ids=None) -> None:
    if indptr.dim() != 1 or indptr.size(0) < 1:
        raise ValueError(f"indptr must be a 1-D tensor of num_nodes + 1 offsets, got shape "
                         f"{list(indptr.shape)}")
    if indptr.dtype != torch.int64:
        raise TypeError(f"indptr must be int64, got {indptr.dtype}")
    _index_vector(indices, "indices")
    if edge_ids is not None and (edge_ids.dim() != 1 or edge_ids.dtype != torch.int64):
        raise TypeError(f"edge_ids must be a 1-D int64 tensor, got "
                        f"{edge_ids.dtype} of shape {list(edge_ids.shape)}")
    if edge_ids is not None:  # (traced, then refused when the program ran: a probe)
        torch._check_value(edge_ids.numel() == indices.numel(),
                           lambda: f"edge_ids has {edge_ids.numel()} entries but indices has "
                                   f"{indices.numel()}")


def _fanouts(fanouts, what: str = "fanouts", replace: bool = False) -> None:
    if len(fanouts) == 0:
        raise ValueError(f"{what} must name at least one hop, got []")
    for hop, fanout in enumerate(fanouts):
        if fanout < -1:
            raise ValueError(f"{what}[{hop}] must be -1 (all neighbors) or >= 0, got {fanout}")
        if replace and fanout > MAX_HOP_EDGES:  # (check_fanout: one node's picks)
            raise ValueError(f"{what}[{hop}] with replacement, the picks of one node would be "
                             f"{fanout}, over the limit of {MAX_HOP_EDGES}: sample fewer seeds "
                             f"per batch or use a smaller fanout")


def _sampling(indptr, indices, seeds, fanouts, edge_ids=None, seed_time=None,
              temporal_strategy="uniform", disjoint=False, replace=False, edge_weight=None,
              edge_time=None, edge_weight_cumsum=None) -> None:
    """The kernels' checks (check_neighbor_sample_args) of what a fake also has, in their
    order, so that a call failing two of them raises the same error either way (a probe:
    the fake had checked disjoint before seed_time's dtype, and none of the per-edge
    tensors)."""
    _csr(indptr, indices, edge_ids)
    _index_vector(seeds, "seeds")
    _fanouts(fanouts, replace=replace)

    def one_each(t, name, count, what):
        words = f"{name} must hold one {what} ({count}), got shape {list(t.shape)}"
        if t.dim() != 1:
            raise ValueError(words)
        torch._check_value(t.numel() == count, lambda: words)

    def per_edge(t, name, dtype):
        if t is None:
            return
        if t.dtype != dtype:
            raise TypeError(f"{name} must be {dtype}, got {t.dtype}")
        one_each(t, name, indices.numel(), "value per CSR edge")
    per_edge(edge_weight, "edge_weight", torch.float32)
    per_edge(edge_weight_cumsum, "edge_weight_cumsum", torch.float64)
    if edge_weight_cumsum is not None and edge_weight is None:
        raise ValueError("edge_weight_cumsum speeds up weighted sampling: pass edge_weight too")
    per_edge(edge_time, "edge_time", torch.int64)
    if temporal_strategy not in ("uniform", "last"):
        raise ValueError(f"temporal_strategy must be 'uniform' or 'last', got "
                         f"'{temporal_strategy}'")
    if (edge_time is None) != (seed_time is None):
        raise ValueError(f"temporal sampling needs both edge_time and seed_time, got only "
                         f"{'edge_time' if edge_time is not None else 'seed_time'}")
    if seed_time is not None:
        if seed_time.dtype != torch.int64:
            raise TypeError(f"seed_time must be int64, got {seed_time.dtype}")
        one_each(seed_time, "seed_time", seeds.numel(), "time per seed")
        if not disjoint:
            raise ValueError("temporal sampling needs disjoint=True: each seed's tree keeps "
                             "its own time")
    if temporal_strategy == "last":
        if edge_time is None:
            raise ValueError("temporal_strategy='last' needs edge_time and seed_time")
        if replace:
            raise ValueError("temporal_strategy='last' takes the most recent edges, it cannot "
                             "sample with replacement (replace=True)")
        if edge_weight is not None:
            raise ValueError("temporal_strategy='last' takes the most recent edges and ignores "
                             "weights: pass edge_weight with temporal_strategy='uniform'")


@torch.library.register_fake("quiver::check_csr")
def _check_csr_fake(indptr, indices, edge_ids=None, num_nodes=-1):
    _no_meta_beside_real(indptr=indptr, indices=indices,
                         **({} if edge_ids is None else {"edge_ids": edge_ids}))
    _csr(indptr, indices, edge_ids)
    return None  # a scan of the values: nothing to trace


@torch.library.register_fake("quiver::check_permutation")
def _check_permutation_fake(order, num_rows, what):
    # What a fake also knows (a probe found these passing while traced, to raise only when
    # run); the scan of the values is the kernel's.
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0 (the rows {what} lists), got {num_rows}")
    if order.dim() != 1 or order.dtype not in _IDS:
        raise TypeError(f"{what} must be a 1-D tensor of int32/int64 ids, got {order.dtype} "
                        f"of shape {list(order.shape)}")
    torch._check_value(order.size(0) == num_rows,
                       lambda: f"{what} must list each of the {num_rows} rows once, got "
                               f"{int(order.size(0))} ids")
    return None


@torch.library.register_fake("quiver::check_fanouts")
def _check_fanouts_fake(fanouts, replace, what="fanouts"):
    _fanouts(fanouts, what, replace)  # (plain ints: the kernel's checks, all of them)
    return None


# The check ops return nothing, so torch.compile's graph passes (AOT autograd's dead-code
# elimination) dropped them and a corrupt CSR passed silently, where eager and export raise.
# Marked as side effects, they stay in the graph and run.
for _check in (torch.ops.quiver.check_csr, torch.ops.quiver.check_permutation,
               torch.ops.quiver.check_fanouts):
    torch.fx.node.has_side_effect(_check.default)


@torch.library.register_fake("quiver::csr_from_coo")
def _csr_from_coo_fake(row, col, num_nodes):
    _no_meta_beside_real(row=row, col=col)
    _index_vector(row, "row")
    _index_vector(col, "col")
    # (without it, indices took col's size and edge_ids row's: code combining the two
    # failed while traced with a shape error, not the kernel's ValueError; from a probe;
    # checked before the dtypes, as the kernel does)
    torch._check_value(row.size(0) == col.size(0),
                       lambda: f"row has {row.size(0)} entries but col has {col.size(0)}")
    if row.dtype != col.dtype:
        raise TypeError(f"row is {row.dtype} but col is {col.dtype}")
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be >= 0, got {num_nodes}")
    # The kernel's bounds too: past them, building the outputs failed in torch's words
    # ("Storage size calculation overflowed"), a probe.
    if num_nodes >= 1 << 60:
        raise ValueError(f"num_nodes = {num_nodes} is too large: its offsets alone would "
                         f"take more than 2^63 bytes")
    if row.dtype == torch.int32 and num_nodes > 2**31:
        raise ValueError(f"num_nodes = {num_nodes} does not fit int32 ids; pass int64 row/col")
    indptr = row.new_empty(num_nodes + 1, dtype=torch.long)
    return indptr, col.new_empty(col.shape), col.new_empty(col.shape, dtype=torch.long)


@torch.library.register_fake("quiver::sample_neighbors")
def _sample_neighbors_fake(indptr, indices, seeds, fanout, replace=False, edge_ids=None,
                           generator=None):
    _csr(indptr, indices, edge_ids)
    _index_vector(seeds, "seeds")
    _fanouts([fanout], "fanout", replace)
    total = torch.library.get_ctx().new_dynamic_size()
    counts = seeds.new_empty(seeds.shape, dtype=torch.long)
    return counts, seeds.new_empty(total, dtype=torch.long), seeds.new_empty(total, dtype=torch.long)


@torch.library.register_fake("quiver::sample_subgraph")
def _sample_subgraph_fake(indptr, indices, seeds, fanouts, replace=False, edge_ids=None,
                          generator=None):
    _sampling(indptr, indices, seeds, fanouts, edge_ids, replace=replace)
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
    _sampling(indptr, indices, seeds, fanouts, edge_ids, seed_time, temporal_strategy, disjoint,
              replace, edge_weight, edge_time, edge_weight_cumsum)
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
    _sampling(indptr, indices, seeds, fanouts, edge_ids, seed_time, temporal_strategy, disjoint,
              replace, edge_weight, edge_time, edge_weight_cumsum)
    relations = len(relation_dst_types)
    if relations < 1 or len(relation_src_types) != relations:
        raise ValueError(f"relation_src_types and relation_dst_types must name the same "
                         f"relations (at least one), got {list(relation_src_types)} and "
                         f"{list(relation_dst_types)}")
    if len(fanouts) % relations:
        raise ValueError(f"fanouts must hold one fanout per relation and hop (hop-major, a "
                         f"multiple of {relations} relations), got {len(fanouts)} values")
    if len(node_type_offsets) < 2:  # the kernel's own check (a negative size here)
        raise ValueError(f"node_type_offsets must hold num_types + 1 >= 2 entries, got "
                         f"{list(node_type_offsets)}")
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
    _csr(indptr, indices)
    _index_vector(src, "src")
    if per_src < 0:
        raise ValueError(f"per_src must be >= 0, got {per_src}")
    # Plain ints, known while tracing: refused then, as the kernel refuses them.
    if not 1 <= max_trials <= 1000:
        raise ValueError(f"max_trials must be in [1, 1000], got {max_trials}")
    num_nodes = indptr.size(0) - 1
    torch._check_value(0 <= dst_begin <= num_nodes,
                       lambda: f"dst_begin = {dst_begin} is outside the graph's {num_nodes} nodes")
    torch._check_value(dst_count >= -1 and (dst_count == -1 or dst_count <= num_nodes - dst_begin),
                       lambda: f"dst_count = {dst_count} from dst_begin = {dst_begin} reaches "
                               f"past the graph's {num_nodes} nodes (-1: to the last node)")
    # The kernel's limit (past it, new_empty had failed with "Overflow when unpacking").
    torch._check_value(
        src.shape[0] * per_src <= MAX_HOP_EDGES,
        lambda: f"the negatives (src x per_src) would be "
                f"{min(src.shape[0] * per_src, 2**63 - 1)}, over the limit of {MAX_HOP_EDGES}: "
                f"draw fewer negatives per source (per_src) or for fewer sources at once")
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
    if table.dim() < 1:
        raise ValueError("table must have at least one dimension (rows), got a scalar")
    _index_vector(ids, "ids")
    # Rows land where the ids are (the CUDA op reads a table on a peer GPU or in pinned
    # host memory and writes on the ids' GPU).
    return table.new_empty((ids.shape[0], *table.shape[1:]), device=ids.device)


@torch.library.register_fake("quiver::gather_tiered_rows")
def _gather_tiered_rows_fake(tiers, positions, ids):
    if not 1 <= len(tiers) <= MAX_ROW_TIERS:
        raise ValueError(f"tiers must hold 1 to {MAX_ROW_TIERS} tensors, got {len(tiers)}")
    _no_meta_beside_real(ids=ids, **{f"tiers[{k}]": t for k, t in enumerate(tiers)},
                         **({} if positions is None else {"positions": positions}))
    for k, tier in enumerate(tiers):
        if tier.dim() < 1:
            raise ValueError(f"tiers[{k}] must have at least one dimension (rows), got a "
                             f"scalar")
        if tier.dtype != tiers[0].dtype:
            raise TypeError(f"tiers[{k}] holds {tier.dtype} but tiers[0] holds "
                            f"{tiers[0].dtype}")
        if tier.shape[1:] != tiers[0].shape[1:]:
            raise ValueError(f"tiers[{k}] has rows of shape {list(tier.shape[1:])} but "
                             f"tiers[0] has rows of shape {list(tiers[0].shape[1:])}")
    if positions is not None:
        _index_vector(positions, "positions")
    _index_vector(ids, "ids")
    return tiers[0].new_empty((ids.shape[0], *tiers[0].shape[1:]), device=ids.device)


@torch._library.register_fake_class("quiver::FeatureTiers")
class FakeFeatureTiers:
    """FeatureTiers while torch.export traces a model that holds one: its tensors (fake),
    and gather as the op it runs."""

    # torch.compile reads each __obj_flatten__ key as an attribute of the fake (for the
    # sizes it holds): a key is an attribute here, or a method of the same name.
    def __init__(self, tiers, positions, stage_host_rows=False, fixed_host_read_share=-1.0,
                 follow_loader_pace=True):
        self._tiers = list(tiers)
        self._positions = positions
        self.stage_host_rows = stage_host_rows
        self.fixed_host_read_share = fixed_host_read_share  # -1: learned, not sent
        self.follow_loader_pace = follow_loader_pace
        self._released = False

    @classmethod
    def __obj_unflatten__(cls, flattened):
        return cls(**dict(flattened))

    def gather(self, ids, host_read_blocks: int = 0):
        return torch.ops.quiver.gather_tiered_rows.default(self._tiers, self._positions, ids)

    # How host rows are read changes no shape: the settings are kept, as the real class
    # keeps them, so that a model that reads them traces the branch it would take.
    def stages_host_rows(self) -> bool:
        return self.stage_host_rows

    def set_stage_host_rows(self, stage: bool) -> None:
        self.stage_host_rows = stage

    def set_group_host_reads(self, group: bool) -> None:
        pass

    def host_read_share(self) -> float:
        return (self.fixed_host_read_share if self.host_read_share_fixed()
                else torch.classes.quiver.FeatureTiers.first_host_read_share())

    def set_host_read_share(self, share) -> None:
        if share is not None and not 0.0 <= share <= 1.0:
            raise ValueError(f"FeatureTiers.set_host_read_share: share is the GPU's share of a "
                             f"staged gather's host rows, in [0, 1] (or None to learn it), "
                             f"got {share}")
        self.fixed_host_read_share = -1.0 if share is None else share

    def host_read_share_fixed(self) -> bool:
        return self.fixed_host_read_share >= 0

    def note_loader_pace(self, loader_ahead: bool) -> None:
        pass

    def set_follow_loader_pace(self, follow: bool) -> None:
        self.follow_loader_pace = follow

    def follows_loader_pace(self) -> bool:
        return self.follow_loader_pace

    def release(self) -> None:
        self._released = True

    def released(self) -> bool:
        return self._released

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

    def device(self) -> torch.device:  # the reader's GPU, as FeatureTiers::device
        if self._positions is not None and self._positions.is_cuda:
            return self._positions.device
        return next((t.device for t in self._tiers if t.is_cuda), torch.device("cpu"))


@torch._library.register_fake_class("quiver::ShardMap")
class FakeShardMap:
    """ShardMap while export traces: its two tensors (fake), the host count and each
    host's local rows."""

    def __init__(self, host_of, local_index, num_hosts, num_replicated=0, local_rows=(),
                 fingerprint=0):
        self._host_of = host_of
        self._local_index = local_index
        self._num_hosts = num_hosts
        self._num_replicated = num_replicated
        self._local_rows = list(local_rows)
        self._fingerprint = fingerprint

    @classmethod
    def __obj_unflatten__(cls, flattened):
        return cls(**dict(flattened))

    def locate(self, ids):
        # (owner, local index) of each id, as int64 on the ids' device.
        _index_vector(ids, "ids")  # (0-d ids had traced, then failed when run: a probe)
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

    def num_replicated(self) -> int:
        return self._num_replicated

    def local_rows(self, host: int) -> int:
        return self._local_rows[host]

    def local_ids(self, host: int):
        return self._host_of.new_empty(self._local_rows[host], dtype=torch.long)

    def fingerprint(self) -> int:
        return self._fingerprint


@torch._library.register_fake_class("quiver::DistFeature")
class FakeDistFeature:
    """DistFeature while export traces: the rows' dtype and shape (a table of no rows) and
    the hosts. The real gather (and its exchange with the other hosts) runs when the
    exported program does."""

    def __init__(self, no_rows, num_rows, host, num_hosts):
        self.no_rows = no_rows  # attributes named as the flattened keys (see FeatureTiers)
        self.num_rows = num_rows
        self._host = host
        self._num_hosts = num_hosts

    @classmethod
    def __obj_unflatten__(cls, flattened):
        return cls(**dict(flattened))

    def gather(self, ids, host_read_blocks: int = 0):
        _index_vector(ids, "ids")  # (0-d ids failed the trace with an IndexError: a probe)
        return self.no_rows.new_empty((ids.shape[0], *self.no_rows.shape[1:]),
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
        self.collective = collective  # named as its flattened key (see FeatureTiers)

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
        return self.collective
