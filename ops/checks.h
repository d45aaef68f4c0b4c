// Argument checks of every op, one check_<op>_args per op, shared by its CPU and CUDA entry
// points. They run in the function the dispatcher calls, so Python, TorchScript and C++
// callers all get them; the kernels behind them trust their inputs. Messages name the
// argument and its actual value (ops/errors.h says which fault raises which type).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ops/errors.h"
#include "ops/row_tiers.h"
#include "ops/sampling_rules.h"

namespace quiver {

// That a tensor's storage still holds every element it views (the tensor checked
// contiguous first): a storage resized or freed under its tensor
// (`x.untyped_storage().resize_(0)`) leaves the tensor's sizes as they were, and a kernel
// reading them read freed memory (a segfault, found by a probe). Checked at each call of
// the ops, for every index vector and CSR array too (samplers and layouts keep their
// tensors across calls; a shrunk storage had sampled or gathered from the bytes after it).
inline void check_storage_holds(const at::Tensor& t, const std::string& name) {
  if (t.numel() == 0 || !t.has_storage()) return;
  const int64_t needed =
      (t.storage_offset() + t.numel()) * static_cast<int64_t>(t.element_size());
  const int64_t held = static_cast<int64_t>(t.storage().nbytes());
  TORCH_CHECK_VALUE(held >= needed, name, " views ", needed, " bytes of its storage, which holds ",
                    held, ": the storage was resized or freed under the tensor (keep a tensor's ",
                    "storage as it is while a store or op reads it)");
}

inline void check_index_vector(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == 1, name, " must be a 1-D tensor, got shape ", t.sizes());
  TORCH_CHECK_TYPE(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, name,
                   " must hold int32 or int64 ids, got ", errors::dtype_name(t.scalar_type()));
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous (a view such as edge_index[0] of a "
              "transposed tensor is not): pass it through .contiguous()");
  check_storage_holds(t, name);
}

// A fanout is -1 (all neighbors) or a count; with replacement every node with neighbors
// yields exactly `fanout` picks, so one node alone must stay within a hop's edge limit.
inline void check_fanout(int64_t fanout, bool replace, const std::string& name) {
  TORCH_CHECK_VALUE(fanout >= -1, name, " must be -1 (all neighbors) or >= 0, got ", fanout);
  if (replace && fanout > kMaxHopEdges) {
    errors::batch_too_large(name + " with replacement, the picks of one node", fanout,
                            kMaxHopEdges);
  }
}

// Shapes and dtypes of a CSR topology. Where its arrays live is each backend's business:
// the CPU kernels need them all on the host; the CUDA kernels take each array from device
// memory or pinned host memory (UVA mode keeps indptr on the GPU, indices on the host).
inline void check_csr_shapes(const at::Tensor& indptr, const at::Tensor& indices,
                             const std::optional<at::Tensor>& edge_ids) {
  TORCH_CHECK_VALUE(indptr.dim() == 1 && indptr.numel() >= 1,
                    "indptr must be a 1-D tensor of num_nodes + 1 offsets, got shape ",
                    indptr.sizes());
  TORCH_CHECK_TYPE(indptr.scalar_type() == at::kLong, "indptr must be int64, got ",
                   errors::dtype_name(indptr.scalar_type()));
  TORCH_CHECK(indptr.is_contiguous(),
              "indptr must be contiguous: pass it through .contiguous()");
  check_storage_holds(indptr, "indptr");
  check_index_vector(indices, "indices");
  if (edge_ids.has_value()) {
    const at::Tensor& eid = *edge_ids;
    TORCH_CHECK_TYPE(eid.dim() == 1 && eid.scalar_type() == at::kLong,
                     "edge_ids must be a 1-D int64 tensor, got ",
                     errors::dtype_name(eid.scalar_type()), " of shape ", eid.sizes());
    TORCH_CHECK(eid.is_contiguous(), "edge_ids must be contiguous: pass it through .contiguous()");
    check_storage_holds(eid, "edge_ids");
    TORCH_CHECK_VALUE(eid.numel() == indices.numel(), "edge_ids has ", eid.numel(),
                      " entries but indices has ", indices.numel());
  }
}

// A whole CSR scanned once, where a topology is made (check_csr; the per-batch ops check only
// the rows they touch): shapes and dtypes, offsets from 0 to the neighbor count and
// non-decreasing, every neighbor id in [0, num_nodes) (num_nodes < 0: indptr's node count;
// a host's part of a partitioned graph holds global ids). One read of each array, on the
// device it lies on; the sentences are errors.h's, as the kernels raise them.
inline void check_whole_csr(const at::Tensor& indptr, const at::Tensor& indices,
                            const std::optional<at::Tensor>& edge_ids, int64_t num_nodes = -1) {
  check_csr_shapes(indptr, indices, edge_ids);
  if (num_nodes < 0) num_nodes = indptr.numel() - 1;
  const int64_t first = indptr[0].item<int64_t>(), last = indptr[-1].item<int64_t>();
  if (first != 0 || last != indices.numel()) errors::csr_ends(first, last, indices.numel());
  if (indptr.numel() > 2) {
    const at::Tensor falls = indptr.narrow(0, 1, indptr.numel() - 1) <
                             indptr.narrow(0, 0, indptr.numel() - 1);
    if (falls.any().item<bool>()) {
      const int64_t node = falls.nonzero()[0][0].item<int64_t>();
      errors::offsets_decrease(node, indptr[node].item<int64_t>(), indptr[node + 1].item<int64_t>());
    }
  }
  if (indices.numel() > 0) {
    const auto [low, high] = at::aminmax(indices);
    const int64_t lo = low.item<int64_t>(), hi = high.item<int64_t>();
    if (lo < 0) errors::neighbor_out_of_range(lo, num_nodes);
    if (hi >= num_nodes) errors::neighbor_out_of_range(hi, num_nodes);
  }
  // Edge ids index edge arrays (features, labels, times): a negative one read another
  // edge's row from the end in Python, or memory before the array in C++ (a probe loaded
  // a saved CSR with a flipped byte in its edge ids).
  if (edge_ids.has_value() && edge_ids->numel() > 0) {
    const int64_t lowest = edge_ids->min().item<int64_t>();
    TORCH_CHECK_INDEX(lowest >= 0, "edge_ids holds ", lowest,
                      ": edge ids index edge arrays and are never negative");
  }
}

// `order` lists each of `num_rows` rows exactly once: a 1-D int32/int64 tensor on any
// device (a hot order, a saved positions map), `what` naming it. One scan where it lies.
inline void check_permutation(const at::Tensor& order, int64_t num_rows, const char* what) {
  TORCH_CHECK_VALUE(num_rows >= 0, "num_rows must be >= 0 (the rows ", what,
                    " lists), got ", num_rows);
  TORCH_CHECK_TYPE(
      order.dim() == 1 && (order.scalar_type() == at::kInt || order.scalar_type() == at::kLong),
      what, " must be a 1-D tensor of int32/int64 ids, got ",
      errors::dtype_name(order.scalar_type()), " of shape ", order.sizes());
  TORCH_CHECK_VALUE(order.numel() == num_rows, what, " must list each of the ", num_rows,
                    " rows once, got ", order.numel(), " ids");
  if (num_rows == 0) return;
  const auto [low, high] = at::aminmax(order);
  const int64_t lo = low.item<int64_t>(), hi = high.item<int64_t>();
  TORCH_CHECK_INDEX(lo >= 0 && hi < num_rows, what, " holds id ", lo < 0 ? lo : hi,
                    ", out of range [0, ", num_rows, ")");
  at::Tensor seen = at::zeros({num_rows}, order.options().dtype(at::kBool));
  seen.index_fill_(0, order.to(at::kLong), true);
  if (!seen.all().item<bool>()) {
    const int64_t missing = seen.logical_not().nonzero()[0][0].item<int64_t>();
    TORCH_CHECK_VALUE(false, what, " is not a permutation: row ", missing,
                      " is missing (and another appears twice)");
  }
}

// A topology cache (sample_subgraph): both tensors or neither; cached_starts holds one
// int32 or int64 start per node, cached_indices neighbor ids of indices' dtype. Their contents are
// checked by the kernels that read them (each cached row must lie inside cached_indices).
inline void check_topology_cache(const at::Tensor& indptr, const at::Tensor& indices,
                                 const std::optional<at::Tensor>& cached_indices,
                                 const std::optional<at::Tensor>& cached_starts) {
  TORCH_CHECK_VALUE(cached_indices.has_value() == cached_starts.has_value(),
                    "a topology cache needs both cached_indices and cached_starts, got only ",
                    cached_indices.has_value() ? "cached_indices" : "cached_starts");
  if (!cached_indices.has_value()) return;
  check_index_vector(*cached_indices, "cached_indices");
  TORCH_CHECK_TYPE(cached_indices->scalar_type() == indices.scalar_type(), "cached_indices is ",
                   errors::dtype_name(cached_indices->scalar_type()), " but indices is ",
                   errors::dtype_name(indices.scalar_type()));
  const at::Tensor& starts = *cached_starts;
  TORCH_CHECK_TYPE(starts.scalar_type() == at::kLong || starts.scalar_type() == at::kInt,
                   "cached_starts must be int32 or int64, got ",
                   errors::dtype_name(starts.scalar_type()));
  TORCH_CHECK_VALUE(starts.dim() == 1 && starts.numel() == indptr.numel() - 1,
                    "cached_starts must hold one start per node (", indptr.numel() - 1,
                    "), got shape ", starts.sizes());
  TORCH_CHECK(starts.is_contiguous(), "cached_starts must be contiguous");
}

inline void check_sample_neighbors_args(const at::Tensor& indptr, const at::Tensor& indices,
                                        const at::Tensor& seeds, int64_t fanout, bool replace,
                                        const std::optional<at::Tensor>& edge_ids) {
  check_csr_shapes(indptr, indices, edge_ids);
  check_index_vector(seeds, "seeds");
  check_fanout(fanout, replace, "fanout");
}

// Per-hop fanouts: at least one, each as check_fanout wants it; `what` names the list.
inline void check_fanouts(at::IntArrayRef fanouts, bool replace, const std::string& what = "fanouts") {
  TORCH_CHECK_VALUE(!fanouts.empty(), what, " must name at least one hop, got []");
  for (size_t hop = 0; hop < fanouts.size(); ++hop) {
    check_fanout(fanouts[hop], replace, what + "[" + std::to_string(hop) + "]");
  }
}

inline void check_sample_subgraph_args(const at::Tensor& indptr, const at::Tensor& indices,
                                       const at::Tensor& seeds, at::IntArrayRef fanouts,
                                       bool replace, const std::optional<at::Tensor>& edge_ids) {
  check_csr_shapes(indptr, indices, edge_ids);
  check_index_vector(seeds, "seeds");
  check_fanouts(fanouts, replace);
}

// neighbor_sample's per-edge arrays (by CSR position) and its temporal and disjoint choices.
inline void check_neighbor_sample_args(const at::Tensor& indptr, const at::Tensor& indices,
                                       const at::Tensor& seeds, at::IntArrayRef fanouts,
                                       bool replace, const std::optional<at::Tensor>& edge_ids,
                                       const std::optional<at::Tensor>& edge_weight,
                                       const std::optional<at::Tensor>& edge_time,
                                       const std::optional<at::Tensor>& seed_time,
                                       c10::string_view temporal_strategy, bool disjoint,
                                       const std::optional<at::Tensor>& edge_weight_cumsum) {
  check_sample_subgraph_args(indptr, indices, seeds, fanouts, replace, edge_ids);
  auto per_edge = [&](const std::optional<at::Tensor>& t, const char* name, at::ScalarType dtype) {
    if (!t.has_value()) return;
    TORCH_CHECK_TYPE(t->scalar_type() == dtype, name, " must be ", errors::dtype_name(dtype),
                     ", got ", errors::dtype_name(t->scalar_type()));
    TORCH_CHECK_VALUE(t->dim() == 1 && t->numel() == indices.numel(), name,
                      " must hold one value per CSR edge (", indices.numel(), "), got shape ",
                      t->sizes());
    TORCH_CHECK(t->is_contiguous(), name, " must be contiguous: pass it through .contiguous()");
  };
  per_edge(edge_weight, "edge_weight", at::kFloat);
  per_edge(edge_weight_cumsum, "edge_weight_cumsum", at::kDouble);
  TORCH_CHECK_VALUE(!edge_weight_cumsum.has_value() || edge_weight.has_value(),
                    "edge_weight_cumsum speeds up weighted sampling: pass edge_weight too");
  per_edge(edge_time, "edge_time", at::kLong);
  TORCH_CHECK_VALUE(temporal_strategy == "uniform" || temporal_strategy == "last",
                    "temporal_strategy must be 'uniform' or 'last', got '", temporal_strategy, "'");
  TORCH_CHECK_VALUE(edge_time.has_value() == seed_time.has_value(),
                    "temporal sampling needs both edge_time and seed_time, got only ",
                    edge_time.has_value() ? "edge_time" : "seed_time");
  if (seed_time.has_value()) {
    TORCH_CHECK_TYPE(seed_time->scalar_type() == at::kLong, "seed_time must be int64, got ",
                     errors::dtype_name(seed_time->scalar_type()));
    TORCH_CHECK_VALUE(seed_time->dim() == 1 && seed_time->numel() == seeds.numel(),
                      "seed_time must hold one time per seed (", seeds.numel(), "), got shape ",
                      seed_time->sizes());
    TORCH_CHECK_VALUE(disjoint,
                      "temporal sampling needs disjoint=True: each seed's tree keeps its own time");
  }
  if (temporal_strategy == "last") {
    TORCH_CHECK_VALUE(edge_time.has_value(),
                      "temporal_strategy='last' needs edge_time and seed_time");
    TORCH_CHECK_VALUE(!replace, "temporal_strategy='last' takes the most recent edges, "
                      "it cannot sample with replacement (replace=True)");
    TORCH_CHECK_VALUE(!edge_weight.has_value(),
                      "temporal_strategy='last' takes the most recent edges and ignores weights: "
                      "pass edge_weight with temporal_strategy='uniform'");
  }
  if (disjoint) {
    // Trees are told apart by key = tree * num_nodes + node.
    const int64_t num_nodes = std::max<int64_t>(indptr.numel() - 1, 1);
    TORCH_CHECK_VALUE(seeds.numel() <= (int64_t{1} << 62) / num_nodes, "disjoint sampling of ",
                      seeds.numel(), " seeds over ", num_nodes,
                      " nodes passes 2^62 tree keys: sample fewer seeds per batch");
  }
}

// hetero_neighbor_sample's graph tables (ops/hetero_layout.h) and per-relation fanouts,
// then every argument neighbor_sample checks.
inline void check_hetero_neighbor_sample_args(
    const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& edge_ids,
    const at::Tensor& seeds, at::IntArrayRef node_type_offsets,
    at::IntArrayRef relation_src_types, at::IntArrayRef relation_dst_types,
    at::IntArrayRef relation_edge_offsets, at::IntArrayRef fanouts, bool replace,
    const std::optional<at::Tensor>& edge_weight, const std::optional<at::Tensor>& edge_time,
    const std::optional<at::Tensor>& seed_time, c10::string_view temporal_strategy,
    bool disjoint, const std::optional<at::Tensor>& edge_weight_cumsum) {
  check_neighbor_sample_args(indptr, indices, seeds, fanouts, replace, edge_ids, edge_weight,
                             edge_time, seed_time, temporal_strategy, disjoint,
                             edge_weight_cumsum);
  const int64_t num_nodes = indptr.numel() - 1;
  const int64_t T = static_cast<int64_t>(node_type_offsets.size()) - 1;
  TORCH_CHECK_VALUE(T >= 1, "node_type_offsets must hold num_types + 1 >= 2 entries, got ",
                    node_type_offsets);
  TORCH_CHECK_VALUE(node_type_offsets[0] == 0 && node_type_offsets[T] == num_nodes,
                    "node_type_offsets must run from 0 to the graph's ", num_nodes,
                    " nodes, got ", node_type_offsets);
  for (int64_t t = 0; t < T; ++t) {
    TORCH_CHECK_VALUE(node_type_offsets[t] <= node_type_offsets[t + 1],
                      "node_type_offsets must not decrease, got ", node_type_offsets);
  }
  const int64_t R = static_cast<int64_t>(relation_dst_types.size());
  TORCH_CHECK_VALUE(R >= 1 && static_cast<int64_t>(relation_src_types.size()) == R,
                    "relation_src_types and relation_dst_types must name the same relations "
                    "(at least one), got ", relation_src_types, " and ", relation_dst_types);
  for (int64_t r = 0; r < R; ++r) {
    TORCH_CHECK_VALUE(0 <= relation_src_types[r] && relation_src_types[r] < T &&
                          0 <= relation_dst_types[r] && relation_dst_types[r] < T,
                      "relation ", r, " joins types ", relation_src_types[r], " -> ",
                      relation_dst_types[r], ", outside the ", T, " node types");
  }
  TORCH_CHECK_VALUE(static_cast<int64_t>(relation_edge_offsets.size()) == R + 1 &&
                        relation_edge_offsets[0] == 0 && relation_edge_offsets[R] == indices.numel(),
                    "relation_edge_offsets must hold num_relations + 1 = ", R + 1,
                    " entries from 0 to the graph's ", indices.numel(), " edges, got ",
                    relation_edge_offsets);
  for (int64_t r = 0; r < R; ++r) {
    TORCH_CHECK_VALUE(relation_edge_offsets[r] <= relation_edge_offsets[r + 1],
                      "relation_edge_offsets must not decrease, got ", relation_edge_offsets);
  }
  TORCH_CHECK_VALUE(static_cast<int64_t>(fanouts.size()) % R == 0,
                    "fanouts must hold one fanout per relation and hop (hop-major, a multiple of ",
                    R, " relations), got ", fanouts.size(), " values");
}

// hetero_neighbor_sample's relation_slice_starts: int32, `expected` entries (R_t - 1 for
// each node of a type with R_t > 1 relations).
inline void check_relation_slice_starts(const std::optional<at::Tensor>& starts,
                                        int64_t expected) {
  if (!starts.has_value()) return;
  TORCH_CHECK_TYPE(starts->scalar_type() == at::kInt, "relation_slice_starts must be int32, got ",
                   errors::dtype_name(starts->scalar_type()));
  TORCH_CHECK_VALUE(starts->dim() == 1 && starts->numel() == expected && starts->is_contiguous(),
                    "relation_slice_starts must be a contiguous 1-D tensor of ", expected,
                    " entries (one per extra relation of each node), got shape ", starts->sizes());
}

// Returns the number of nodes the draws range over (dst_count, or to the last node for -1).
inline int64_t check_sample_negatives_args(const at::Tensor& indptr, const at::Tensor& indices,
                                           const at::Tensor& src, int64_t per_src,
                                           int64_t max_trials, int64_t dst_begin,
                                           int64_t dst_count) {
  check_csr_shapes(indptr, indices, std::nullopt);
  check_index_vector(src, "src");
  TORCH_CHECK_VALUE(per_src >= 0, "per_src must be >= 0, got ", per_src);
  // Each trial scans the source's neighbors; past a thousand a negative is a true edge
  // with probability density^1000, while 2^62 trials of a node that links to every
  // destination ran without end.
  TORCH_CHECK_VALUE(max_trials >= 1 && max_trials <= 1000, "max_trials must be in [1, 1000], got ",
                    max_trials);
  const int64_t num_nodes = indptr.numel() - 1;
  TORCH_CHECK_VALUE(0 <= dst_begin && dst_begin <= num_nodes, "dst_begin = ", dst_begin,
                    " is outside the graph's ", num_nodes, " nodes");
  TORCH_CHECK_VALUE(dst_count >= -1 && (dst_count == -1 || dst_count <= num_nodes - dst_begin),
                    "dst_count = ", dst_count, " from dst_begin = ", dst_begin,
                    " reaches past the graph's ", num_nodes, " nodes (-1: to the last node)");
  const int64_t range = dst_count == -1 ? num_nodes - dst_begin : dst_count;
  TORCH_CHECK_VALUE(src.numel() == 0 || per_src == 0 || range > 0,
                    "negatives cannot be drawn from an empty range of nodes (dst_begin = ",
                    dst_begin, ", dst_count = ", dst_count, ", the graph has ", num_nodes,
                    " nodes)");
  // (Not errors::batch_too_large, whose advice is a smaller fanout: negatives have none.)
  TORCH_CHECK_VALUE(src.numel() == 0 || per_src <= kMaxHopEdges / src.numel(),
                    "the negatives (src x per_src) would be ",
                    saturating_mul(src.numel(), per_src), ", over the limit of ", kMaxHopEdges,
                    ": draw fewer negatives per source (per_src) or for fewer sources at once");
  return range;
}

inline void check_csr_from_coo_args(const at::Tensor& row, const at::Tensor& col,
                                    int64_t num_nodes) {
  check_index_vector(row, "row");
  check_index_vector(col, "col");
  TORCH_CHECK_VALUE(row.numel() == col.numel(), "row has ", row.numel(), " entries but col has ",
                    col.numel());
  TORCH_CHECK_TYPE(row.scalar_type() == col.scalar_type(), "row is ",
                   errors::dtype_name(row.scalar_type()), " but col is ",
                   errors::dtype_name(col.scalar_type()));
  TORCH_CHECK(row.device() == col.device(), "row is on ", row.device(), " but col is on ",
              col.device());
  TORCH_CHECK_VALUE(num_nodes >= 0, "num_nodes must be >= 0, got ", num_nodes);
  // 8 bytes an offset: past 2^60 nodes their size overflows int64 (torch's error named
  // neither num_nodes nor its value).
  TORCH_CHECK_VALUE(num_nodes < (int64_t{1} << 60), "num_nodes = ", num_nodes,
                    " is too large: its offsets alone would take more than 2^63 bytes");
  if (row.scalar_type() == at::kInt) {
    TORCH_CHECK_VALUE(num_nodes <= std::numeric_limits<int32_t>::max() + int64_t{1},
                      "num_nodes = ", num_nodes, " does not fit int32 ids; pass int64 row/col");
  }
}

inline void check_gather_rows_args(const at::Tensor& table, const at::Tensor& ids) {
  TORCH_CHECK_VALUE(table.dim() >= 1,
                    "table must have at least one dimension (rows), got a scalar");
  TORCH_CHECK_VALUE(table.is_contiguous(),
                    "table must be contiguous (row-major); call .contiguous() once up front");
  check_storage_holds(table, "table");
  check_index_vector(ids, "ids");
}

inline void check_tier_storage(at::ArrayRef<at::Tensor> tiers,
                               const std::optional<at::Tensor>& positions) {
  for (size_t k = 0; k < tiers.size(); ++k) {
    check_storage_holds(tiers[k], "tiers[" + std::to_string(k) + "]");
  }
  if (positions.has_value()) check_storage_holds(*positions, "positions");
}

// A tiered row layout: tier k holds the rows at positions [begin_k, begin_k + rows_k), in
// order, all tiers with one dtype and row shape; positions[id] is the position of row id
// (the identity when absent).
inline void check_row_tiers(at::ArrayRef<at::Tensor> tiers,
                            const std::optional<at::Tensor>& positions) {
  TORCH_CHECK_VALUE(!tiers.empty() && tiers.size() <= static_cast<size_t>(kMaxRowTiers),
                    "tiers must hold 1 to ", kMaxRowTiers, " tensors, got ", tiers.size());
  const at::Tensor& first = tiers[0];
  for (size_t k = 0; k < tiers.size(); ++k) {
    const at::Tensor& t = tiers[k];
    TORCH_CHECK_VALUE(t.dim() >= 1, "tiers[", k,
                      "] must have at least one dimension (rows), got a scalar");
    TORCH_CHECK_VALUE(t.is_contiguous(), "tiers[", k, "] must be contiguous (row-major)");
    TORCH_CHECK_TYPE(t.scalar_type() == first.scalar_type(), "tiers[", k, "] holds ",
                     errors::dtype_name(t.scalar_type()), " but tiers[0] holds ",
                     errors::dtype_name(first.scalar_type()));
    TORCH_CHECK_VALUE(t.sizes().slice(1) == first.sizes().slice(1), "tiers[", k,
                      "] has rows of shape ", t.sizes().slice(1),
                      " but tiers[0] has rows of shape ", first.sizes().slice(1));
  }
  if (positions.has_value()) check_index_vector(*positions, "positions");
  check_tier_storage(tiers, positions);  // once each is known to be contiguous
}

// That every entry of a layout's positions names a row the tiers hold. Checked once, where
// a layout is made (FeatureTiers), so that a bad table fails there rather than at the first
// gather that reads the entry; the ops check the positions they read in their kernels.
inline void check_positions_in_tiers(at::ArrayRef<at::Tensor> tiers,
                                     const std::optional<at::Tensor>& positions) {
  if (!positions.has_value() || positions->numel() == 0) return;
  int64_t rows = 0;
  for (const at::Tensor& t : tiers) rows += t.size(0);
  // One pass in the table's own dtype; the mask is made only to name a bad entry.
  const auto [low, high] = at::aminmax(*positions);
  if (low.item<int64_t>() >= 0 && high.item<int64_t>() < rows) return;
  const at::Tensor bad = positions->lt(0).logical_or_(positions->ge(rows));
  const int64_t id = bad.nonzero().select(0, 0).item<int64_t>();
  errors::position_out_of_range(id, positions->select(0, id).item<int64_t>(), rows);
}

inline void check_gather_tiered_rows_args(at::ArrayRef<at::Tensor> tiers,
                                          const std::optional<at::Tensor>& positions,
                                          const at::Tensor& ids) {
  check_row_tiers(tiers, positions);
  check_index_vector(ids, "ids");
}

// A layout's cap on the thread blocks of a gather that reads host rows (0: none).
inline void check_host_read_blocks(int64_t host_read_blocks) {
  TORCH_CHECK_VALUE(host_read_blocks >= 0, "host_read_blocks must be >= 0 (0: no limit), got ",
                    host_read_blocks);
}

// How many distinct ids a tiered layout answers: one per entry of positions, else one per row.
inline int64_t tiered_id_count(at::ArrayRef<at::Tensor> tiers,
                               const std::optional<at::Tensor>& positions) {
  if (positions.has_value()) return positions->numel();
  int64_t rows = 0;
  for (const at::Tensor& t : tiers) rows += t.size(0);
  return rows;
}

// A gather of rows of no bytes moves nothing, so its kernels never run and never see the
// ids: they are checked here instead (tensor ops on the ids' device; such tables are rare
// enough that the error path's synchronization does not matter).
inline void check_ids_of_empty_rows(at::ArrayRef<at::Tensor> tiers,
                                    const std::optional<at::Tensor>& positions,
                                    const at::Tensor& ids) {
  if (ids.numel() == 0) return;
  const int64_t allowed = tiered_id_count(tiers, positions);
  const at::Tensor ids64 = ids.to(at::kLong);
  const at::Tensor bad = (ids64 < 0).logical_or_(ids64 >= allowed);
  if (bad.any().item<bool>()) {
    const int64_t index = bad.nonzero().select(0, 0).item<int64_t>();
    errors::id_out_of_range("ids", index, ids64.select(0, index).item<int64_t>(), allowed);
  }
  if (!positions.has_value()) return;
  int64_t rows = 0;
  for (const at::Tensor& t : tiers) rows += t.size(0);
  const at::Tensor where = positions->index_select(0, ids64.to(positions->device())).to(at::kLong);
  const at::Tensor far = (where < 0).logical_or_(where >= rows);
  if (far.any().item<bool>()) {
    const int64_t index = far.nonzero().select(0, 0).item<int64_t>();
    errors::position_out_of_range(ids64.select(0, index).item<int64_t>(),
                                  where.select(0, index).item<int64_t>(), rows);
  }
}

// Bytes of one row of a table shaped like `t` ([rows, *row_shape]).
inline int64_t row_bytes_of(const at::Tensor& t) {
  int64_t elements = 1;
  for (int64_t d = 1; d < t.dim(); ++d) elements *= t.size(d);
  return elements * static_cast<int64_t>(t.element_size());
}

// The shape of `rows` rows of `like`'s row shape (like: [any, *row_shape]).
inline std::vector<int64_t> rows_like(const at::Tensor& like, int64_t rows) {
  std::vector<int64_t> shape = like.sizes().vec();
  shape[0] = rows;
  return shape;
}

// Raises when a batch may hold more nodes than its local indices (int32) can number. The
// limit is a parameter so that a test can inject a small one.
inline void check_batch_nodes(int64_t nodes_bound, int64_t limit = kMaxBatchNodes) {
  if (nodes_bound > limit) errors::batch_too_large("the nodes of this batch", nodes_bound, limit);
}

// Host-side range check of ids against [0, limit). `what` names the argument.
template <typename id_t>
void check_ids_in_range(const id_t* ids, int64_t n, int64_t limit, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    if (id < 0 || id >= limit) errors::id_out_of_range(what, i, id, limit);
  }
}

}  // namespace quiver
