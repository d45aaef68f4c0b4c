// Typed C++ calls to the quiver ops, through the dispatcher (so CPU and CUDA inputs both
// work, exactly as from Python). Link TorchQuiverOps::torch_quiver_ops to register them.
// Argument meanings are documented once, in library.cpp (the registrar).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <tuple>
#include <vector>

namespace quiver {

namespace detail {
template <typename Signature>
c10::TypedOperatorHandle<Signature> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}
}  // namespace detail

// (indptr, indices, edge_ids)
// Raises (ValueError, IndexError, TypeError) unless the CSR is whole and sound (see check_csr
// in library.cpp).
inline void check_csr(const at::Tensor& indptr, const at::Tensor& indices,
                      const std::optional<at::Tensor>& edge_ids = std::nullopt,
                      int64_t num_nodes = -1) {
  static const auto handle =
      detail::op<void(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                      int64_t)>("quiver::check_csr");
  handle.call(indptr, indices, edge_ids, num_nodes);
}

inline std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_from_coo(const at::Tensor& row,
                                                                   const at::Tensor& col,
                                                                   int64_t num_nodes) {
  static const auto handle = detail::op<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, int64_t)>("quiver::csr_from_coo");
  return handle.call(row, col, num_nodes);
}

// (counts, neighbors, sampled_edge_ids)
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_neighbors(
    const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds, int64_t fanout,
    bool replace = false, const std::optional<at::Tensor>& edge_ids = std::nullopt,
    const std::optional<at::Generator>& generator = std::nullopt) {
  static const auto handle = detail::op<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, bool,
      const std::optional<at::Tensor>&, const std::optional<at::Generator>&)>(
      "quiver::sample_neighbors");
  return handle.call(indptr, indices, seeds, fanout, replace, edge_ids, generator);
}

// (node_ids, rows, cols, sampled_edge_ids, nodes_per_hop, edges_per_hop)
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
sample_subgraph(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                c10::IntArrayRef fanouts, bool replace = false,
                const std::optional<at::Tensor>& edge_ids = std::nullopt,
                const std::optional<at::Generator>& generator = std::nullopt) {
  static const auto handle =
      detail::op<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
          const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::IntArrayRef, bool,
          const std::optional<at::Tensor>&, const std::optional<at::Generator>&)>(
          "quiver::sample_subgraph");
  return handle.call(indptr, indices, seeds, fanouts, replace, edge_ids, generator);
}

// (node_ids, batch, rows, cols, sampled_edge_ids, nodes_per_hop, edges_per_hop)
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                  at::Tensor>
neighbor_sample(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                c10::IntArrayRef fanouts, bool replace = false,
                const std::optional<at::Tensor>& edge_ids = std::nullopt,
                const std::optional<at::Tensor>& edge_weight = std::nullopt,
                const std::optional<at::Tensor>& edge_time = std::nullopt,
                const std::optional<at::Tensor>& seed_time = std::nullopt,
                bool strict_time = false, c10::string_view temporal_strategy = "uniform",
                bool disjoint = false,
                const std::optional<at::Generator>& generator = std::nullopt,
                const std::optional<at::Tensor>& edge_weight_cumsum = std::nullopt) {
  static const auto handle = detail::op<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                                                   at::Tensor, at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::IntArrayRef, bool,
      const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
      const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, bool, c10::string_view,
      bool, const std::optional<at::Generator>&, const std::optional<at::Tensor>&)>(
      "quiver::neighbor_sample");
  return handle.call(indptr, indices, seeds, fanouts, replace, edge_ids, edge_weight, edge_time,
                     seed_time, strict_time, temporal_strategy, disjoint, generator,
                     edge_weight_cumsum);
}

// (node_ids, batch, rows, cols, sampled_edge_ids, nodes_per_type_hop,
//  edges_per_relation_hop): see hetero_neighbor_sample in library.cpp.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                  at::Tensor>
hetero_neighbor_sample(const at::Tensor& indptr, const at::Tensor& indices,
                       const at::Tensor& edge_ids, const at::Tensor& seeds,
                       c10::IntArrayRef node_type_offsets, c10::IntArrayRef relation_src_types,
                       c10::IntArrayRef relation_dst_types,
                       c10::IntArrayRef relation_edge_offsets, c10::IntArrayRef fanouts,
                       bool replace = false,
                       const std::optional<at::Tensor>& edge_weight = std::nullopt,
                       const std::optional<at::Tensor>& edge_time = std::nullopt,
                       const std::optional<at::Tensor>& seed_time = std::nullopt,
                       bool strict_time = false, c10::string_view temporal_strategy = "uniform",
                       bool disjoint = false,
                       const std::optional<at::Generator>& generator = std::nullopt,
                       const std::optional<at::Tensor>& edge_weight_cumsum = std::nullopt) {
  static const auto handle = detail::op<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                                                   at::Tensor, at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
      c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef,
      bool, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
      const std::optional<at::Tensor>&, bool, c10::string_view, bool,
      const std::optional<at::Generator>&, const std::optional<at::Tensor>&)>(
      "quiver::hetero_neighbor_sample");
  return handle.call(indptr, indices, edge_ids, seeds, node_type_offsets, relation_src_types,
                     relation_dst_types, relation_edge_offsets, fanouts, replace, edge_weight,
                     edge_time, seed_time, strict_time, temporal_strategy, disjoint, generator,
                     edge_weight_cumsum);
}

// Negative destinations, per_src a source (see sample_negatives in library.cpp).
inline at::Tensor sample_negatives(const at::Tensor& indptr, const at::Tensor& indices,
                                   const at::Tensor& src, int64_t per_src,
                                   bool exclude_edges = true, int64_t max_trials = 8,
                                   bool out_rows = false,
                                   const std::optional<at::Generator>& generator = std::nullopt,
                                   int64_t dst_begin = 0, int64_t dst_count = -1) {
  static const auto handle =
      detail::op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                            bool, int64_t, bool, const std::optional<at::Generator>&, int64_t,
                            int64_t)>("quiver::sample_negatives");
  return handle.call(indptr, indices, src, per_src, exclude_edges, max_trials, out_rows,
                     generator, dst_begin, dst_count);
}

inline at::Tensor gather_rows(const at::Tensor& table, const at::Tensor& ids) {
  static const auto handle =
      detail::op<at::Tensor(const at::Tensor&, const at::Tensor&)>("quiver::gather_rows");
  return handle.call(table, ids);
}

// Rows ids of a table split over tiers (see gather_tiered_rows in library.cpp; how host
// rows are read is an option of <quiver/feature_tiers.h>).
inline at::Tensor gather_tiered_rows(at::TensorList tiers,
                                     const std::optional<at::Tensor>& positions,
                                     const at::Tensor& ids) {
  static const auto handle =
      detail::op<at::Tensor(at::TensorList, const std::optional<at::Tensor>&, const at::Tensor&)>(
          "quiver::gather_tiered_rows");
  return handle.call(tiers, positions, ids);
}

}  // namespace quiver
