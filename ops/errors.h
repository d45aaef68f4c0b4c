// The error sentences of the ops, each written once. CPU kernels, CUDA host wrappers (after
// reading a device status) and runtime classes raise through these, so one fault reads the
// same and has the same Python type whichever backend or caller met it:
// dtypes -> TypeError, bad values -> ValueError, ids out of range -> IndexError,
// devices and placement -> RuntimeError.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>

namespace quiver::errors {

// A dtype as Python spells it (`torch.int32`), where c10 prints `Int`: the messages reach
// Python users, who never see c10's names. (getDtypeNames throws for a type it does not
// name, such as Undefined: an error being built must not throw another.)
inline std::string dtype_name(c10::ScalarType type) {
  try {
    return "torch." + c10::getDtypeNames(type).first;
  } catch (const c10::Error&) {
    return c10::toString(type);
  }
}

// `what`[index] = id is outside [0, limit): a seed, an id to gather, a COO endpoint.
[[noreturn]] inline void id_out_of_range(const char* what, int64_t index, int64_t id,
                                         int64_t limit) {
  TORCH_CHECK_INDEX(false, what, "[", index, "] = ", id, " is out of range [0, ", limit, ")");
}

// A neighbor id stored in `indices` is not a node of the graph.
[[noreturn]] inline void neighbor_out_of_range(int64_t id, int64_t num_nodes) {
  TORCH_CHECK_INDEX(false, "indices holds node id ", id, ", out of range [0, ", num_nodes,
                    "): the CSR is corrupt");
}

// Row `node` of the CSR does not lie inside `indices`.
[[noreturn]] inline void row_out_of_bounds(int64_t node, int64_t begin, int64_t end,
                                           int64_t num_edges) {
  TORCH_CHECK_VALUE(false, "indptr and indices disagree at node ", node, ": indptr[", node,
                    "] = ", begin, ", indptr[", node + 1, "] = ", end, ", indices has ", num_edges,
                    " entries: the CSR is corrupt");
}

// A topology cache's row `node` (cached_starts[node] = start, `degree` neighbors) does not
// lie inside cached_indices.
[[noreturn]] inline void cached_row_out_of_bounds(int64_t node, int64_t start, int64_t degree) {
  TORCH_CHECK_VALUE(false, "cached_starts[", node, "] = ", start, " with degree ", degree,
                    " does not lie inside cached_indices: the topology cache is corrupt");
}

// indptr falls between node `node` and the next.
[[noreturn]] inline void offsets_decrease(int64_t node, int64_t here, int64_t next) {
  TORCH_CHECK_VALUE(false, "indptr must be non-decreasing, but indptr[", node, "] = ", here,
                    " > indptr[", node + 1, "] = ", next, ": the CSR is corrupt");
}

// indptr does not start at 0 or does not end at the number of indices.
[[noreturn]] inline void csr_ends(int64_t first, int64_t last, int64_t num_edges) {
  TORCH_CHECK_VALUE(false, "indptr and indices disagree: indptr[0] = ", first,
                    " and indptr[-1] = ", last, ", but indices has ", num_edges,
                    " entries: the CSR is corrupt");
}

// A weight a weighted sampler read is not a finite positive number.
[[noreturn]] inline void bad_edge_weight(int64_t pos, double weight, int64_t node) {
  TORCH_CHECK_VALUE(false, "edge_weight[", pos, "] = ", weight, " (an edge of node ", node,
                    ") must be finite and > 0: drop an edge that must never be sampled");
}

// A row's prefix sums of weights do not grow at CSR position `pos`.
[[noreturn]] inline void cumsum_not_increasing(int64_t pos, int64_t node) {
  TORCH_CHECK_VALUE(false, "edge_weight_cumsum does not grow at CSR position ", pos,
                    " (an edge of node ", node, "): it must hold each row's inclusive prefix "
                    "sums of positive weights (torch_quiver_ops.ops.row_cumsum)");
}

// A row's prefix sums do not start at its first weight (CSR position `pos`).
[[noreturn]] inline void cumsum_not_per_row(int64_t pos, int64_t node) {
  TORCH_CHECK_VALUE(false, "edge_weight_cumsum at CSR position ", pos, " (the first edge of node ",
                    node, "'s row or relation slice) is not that edge's weight: the sums must "
                    "restart at each row (torch_quiver_ops.ops.row_cumsum; on a heterogeneous "
                    "graph, at each relation slice: row_cumsum(topo.slice_indptr(), weights))");
}

// A sampled edge's time breaks the seed time's rule: its row is not sorted by time.
[[noreturn]] inline void edge_time_unsorted(int64_t node, int64_t pos, int64_t seed_time) {
  TORCH_CHECK_VALUE(false, "edge_time is not non-decreasing within the row of node ", node,
                    ": the edge at CSR position ", pos, " was admitted for seed time ", seed_time,
                    " but is later; sort each row by time (torch_quiver_ops.ops.sort_rows_by_time)");
}

// positions[id] names no row of the tiers.
[[noreturn]] inline void position_out_of_range(int64_t id, int64_t position, int64_t rows) {
  TORCH_CHECK_INDEX(false, "positions[", id, "] = ", position, " is out of range [0, ", rows,
                    "), the rows the tiers hold");
}

// A batch would produce more than `limit` of something (edges of a hop, nodes).
[[noreturn]] inline void batch_too_large(const std::string& what, int64_t count, int64_t limit) {
  TORCH_CHECK_VALUE(false, what, " would be ", count, ", over the limit of ", limit,
                    ": sample fewer seeds per batch or use a smaller fanout");
}

// What batch_too_large names for hop `hop` (-1: the one hop of sample_neighbors).
inline std::string hop_edges_name(int64_t hop) {
  return hop < 0 ? std::string("the sampled edges")
                 : "the sampled edges of hop " + std::to_string(hop);
}

// Checks the first and last offsets of a CSR, read wherever indptr lives.
inline void check_csr_ends(int64_t first, int64_t last, int64_t num_edges) {
  if (first != 0 || last != num_edges) csr_ends(first, last, num_edges);
}

}  // namespace quiver::errors
