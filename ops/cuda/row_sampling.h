// Torch-free interface of per-row neighbor sampling on the GPU, the stage that both
// sample_neighbors (one hop) and sample_subgraph (every hop) run: plan each row (its CSR
// span and how many neighbors it yields), scan the counts into output offsets, then
// sample. The host wrappers validate arguments, allocate from PyTorch's caching allocator
// and pass the current stream; these launches trust their inputs, except that every node
// id and CSR row is bounds-checked before it is dereferenced and a violation is recorded
// in a DeviceStatus. Every launcher returns the cudaError_t of its last launch or CUB call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/device_status.h"
#include "ops/sampling_rules.h"

namespace quiver::cuda {

// A CSR whose arrays the GPU can read: device memory, or pinned host memory (UVA).
// Optionally a topology cache in GPU memory: the neighbor lists of some nodes copied into
// cached_indices, node v's at cached_starts[v] (-1: not cached), read instead of indices.
template <typename index_t>
struct Csr {
  const int64_t* indptr;
  const index_t* indices;
  const int64_t* edge_ids;  // null: report CSR positions as edge ids
  int64_t num_nodes;
  int64_t num_edges;
  const index_t* cached_indices = nullptr;
  const int64_t* cached_starts = nullptr;    // null (and null cached_starts32): no cache
  const int32_t* cached_starts32 = nullptr;  // int32 starts, half the bytes a node
  int64_t num_cached = 0;                    // entries of cached_indices
};

// Philox key and offset drawn from PyTorch's CUDA generator for one call.
struct PhiloxKey {
  uint64_t seed;
  uint64_t offset;
};

// The per-row rules of neighbor_sample; all unset, the uniform rows of sample_subgraph.
// Per-edge arrays are indexed by CSR position and readable by the GPU (device or pinned).
struct RowRules {
  const float* edge_weight = nullptr;  // weighted rows (weighted_rows.cu)
  const double* weight_sums = nullptr;  // each row's prefix sums of edge_weight, or null
  const int64_t* edge_time = nullptr;  // sorted within rows; with seed_time, on the device
  const int64_t* seed_time = nullptr;  // one per tree
  bool strict_time = false;            // admit time < seed time (else <=)
  bool last = false;                   // the most recent `count` admitted edges
  // > 0 (disjoint trees): a frontier key is tree * tree_nodes + node, and sampled
  // neighbors are keyed in their row's tree.
  int64_t tree_nodes = 0;
  DeviceStatus* status = nullptr;      // where sampling records bad weights and times
  RelationRows relations = {};         // heterogeneous graphs (hetero_neighbor_sample)
  const int64_t* hop_fanouts = nullptr;  // with relations: this hop's fanout of each one
};

// How one hop samples: its fanout (-1: all neighbors), with or without replacement, and
// its randomness: row r draws from Philox stream stream_base + r. The key is `key`, or, when
// `device_key` is set, the {seed, offset} pair there (device memory written before the hop
// runs: a replayed CUDA graph reads each call's own key).
struct HopRule {
  int64_t fanout;
  bool replace;
  PhiloxKey key;
  uint64_t stream_base;
  const int64_t* device_key = nullptr;
  RowRules rules = {};
};

// The rows (nodes) of one hop and, per row, device arrays of num_rows entries: its CSR
// start, its degree and the number of neighbors it yields, and (with a topology cache) its
// start in the cache or -1. When `live` is given (device {begin, end}), only the first
// live[1] - live[0] rows are real and the others yield nothing, so a hop can be queued
// before the host knows its size.
struct RowPlan {
  const int64_t* nodes;
  const int64_t* live;
  int64_t num_rows;
  int64_t* begin;
  int64_t* degree;
  int64_t* count;
  int64_t* cached = nullptr;  // needed when the Csr has a cache
  // When set, the order the sampling kernel visits rows in (a permutation of the rows, see
  // order_rows_by_begin); the results do not depend on it.
  const int64_t* order = nullptr;
  // With RelationRows (rows_per_node > 1 or tables set): each row's fanout, written by
  // plan_rows; num_rows is then the frontier's size times rows_per_node, and row r belongs
  // to node nodes[r / rows_per_node].
  int64_t* fanout = nullptr;
};

// Where a hop's sampled edges go: row r writes count[r] neighbors (global ids) and edge
// ids at offsets[r]; when `cols` is given, also *col_base + r (col_base on the device; r /
// rows_per_node with RelationRows) as each edge's target. `pick_sets` is scratch for rows that pick more than
// kSharedPicks neighbors without replacement (see needs_pick_sets): 2 * (edges of the hop)
// entries cleared to -1, row r using those from 2 * offsets[r].
struct HopOutput {
  const int64_t* offsets;
  int64_t* neighbors;
  int64_t* edge_ids;
  int64_t* cols;
  const int64_t* col_base;
  int64_t* pick_sets;
};

// Picks per row that Floyd's algorithm keeps in shared memory, scanning them to test
// membership; a row with more keeps an open-addressing set in HopOutput::pick_sets, so
// large fanouts cost O(k), not O(k^2).
constexpr int64_t kSharedPicks = 32;
inline bool needs_pick_sets(int64_t fanout, bool replace) {
  return !replace && fanout > kSharedPicks;
}

// What plan_rows checks besides each node and row: whether the nodes are seeds (which
// picks the error code for an out-of-range id), and indptr[0] == 0, indptr[-1] == num_edges.
struct PlanChecks {
  bool nodes_are_seeds;
  bool csr_ends;
};

template <typename index_t>
cudaError_t plan_rows(const Csr<index_t>& csr, const RowPlan& plan, const HopRule& rule,
                      PlanChecks checks, DeviceStatus* status, cudaStream_t stream);

// offsets[0] = 0, offsets[i + 1] = values[0] + ... + values[i] (n + 1 entries).
size_t offsets_workspace_bytes(int64_t n);
cudaError_t offsets_from_counts(const int64_t* values, int64_t n, int64_t* offsets, void* workspace,
                                size_t workspace_bytes, cudaStream_t stream);

template <typename index_t>
cudaError_t sample_rows(const Csr<index_t>& csr, const RowPlan& plan, const HopRule& rule,
                        const HopOutput& out, cudaStream_t stream);

// The plan's rows sorted by where their neighbor lists start (plan.begin), into `order`.
// Over pinned host memory (UVA) the GPU reads lists faster in address order: its reach
// over host pages, not PCIe, limits random reads of a large table (as for feature rows,
// row_gather.h: PositionOrder). Each row's draws are keyed by the row, not by the thread
// that samples it, so visiting rows in this order changes no result. Scratch: two arrays of
// num_rows entries and CUB's workspace, from the caller; lists start below 2^end_bit.
size_t row_order_workspace_bytes(int64_t num_rows, int end_bit);
// keys[i] = i * tree_nodes + seeds[i] for disjoint trees; a seed outside [0, tree_nodes)
// is recorded as kSeedOutOfRange (and keyed as node 0 of its tree).
cudaError_t tree_keys(const int64_t* seeds, int64_t n, int64_t tree_nodes, int64_t* keys,
                      DeviceStatus* status, cudaStream_t stream);

cudaError_t order_rows_by_begin(const RowPlan& plan, int end_bit, int64_t* sorted_begin,
                                int64_t* rows, int64_t* order, void* workspace,
                                size_t workspace_bytes, cudaStream_t stream);

}  // namespace quiver::cuda
