// Torch-free interface of the CUDA sampling and reindexing kernels. The host wrappers
// (ops/cuda/sample_*.cpp) validate arguments, allocate from PyTorch's caching allocator
// and pass the current stream; these launches trust their inputs, except that every
// node id and CSR row is bounds-checked before it is dereferenced and a violation is
// recorded in a DeviceStatus for the host to report after its next sync.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace quiver::cuda {

// The first invalid input a kernel met. Written once (the first error wins), read by the
// host after the hop's single synchronization.
enum StatusCode : long long {
  kStatusOk = 0,
  kSeedOutOfRange = 1,      // index = seed position, value = seed
  kNeighborOutOfRange = 2,  // value = node id found in indices
  kRowOutOfBounds = 3,      // index = node, value = indptr[node], extra = indptr[node + 1]
  kCsrEnds = 4,             // value = indptr[0], extra = indptr[num_nodes]
};
struct DeviceStatus {
  long long code;
  long long index;
  long long value;
  long long extra;
};

// A CSR whose arrays the GPU can read: device memory, or pinned host memory (UVA).
template <typename index_t>
struct Csr {
  const int64_t* indptr;
  const index_t* indices;
  const int64_t* edge_ids;  // null: report CSR positions as edge ids
  int64_t num_nodes;
  int64_t num_edges;
};

// Philox key and offset drawn from PyTorch's CUDA generator for one call.
struct PhiloxKey {
  uint64_t seed;
  uint64_t offset;
};

// Per row (node) of a batch: CSR start, degree, and the number of neighbors it yields.
// Launched for `max_rows` rows; when `live` is given (device {begin, end}), only the first
// live[1] - live[0] rows are real and the others yield nothing, so a hop can be queued
// before the host knows its size. `nodes_are_seeds` picks the error code for an
// out-of-range id; `check_ends` also checks indptr[0] == 0 and indptr[-1] == num_edges.
template <typename index_t>
void plan_rows(const Csr<index_t>& csr, const int64_t* nodes, int64_t max_rows,
               const int64_t* live, int64_t fanout, bool replace, bool nodes_are_seeds,
               bool check_ends, int64_t* row_begin, int64_t* row_degree, int64_t* row_count,
               DeviceStatus* status, cudaStream_t stream);

// offsets[0] = 0, offsets[i + 1] = values[0] + ... + values[i] (n + 1 entries).
size_t offsets_workspace_bytes(int64_t n);
void offsets_from_counts(const int64_t* values, int64_t n, int64_t* offsets, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream);

// Samples every planned row: row r writes row_count[r] neighbors (global ids) and edge ids
// at out_offsets[r]. When cols_out is given, it also writes *col_base + r (col_base on the
// device) as each edge's target. Row r draws from Philox stream `stream_base + r`.
template <typename index_t>
void sample_rows(const Csr<index_t>& csr, const int64_t* row_begin, const int64_t* row_degree,
                 const int64_t* row_count, const int64_t* out_offsets, int64_t num_rows,
                 int64_t fanout, bool replace, PhiloxKey key, uint64_t stream_base,
                 int64_t* neighbors_out, int64_t* edge_ids_out, int64_t* cols_out,
                 const int64_t* col_base, cudaStream_t stream);

// ---- Reindexing: an open-addressing table from global node id to local index ----

// Bytes of one table slot; a table of `capacity` (a power of two) slots is cleared by
// clear_node_table before use and sized for every node a batch can reach (at most half full).
size_t node_table_slot_bytes();
void clear_node_table(void* table, int64_t capacity, cudaStream_t stream);

// Inserts the seeds nodes[0..n) with local index = position of each id's first occurrence.
// `entries` is scratch of n entries.
void insert_nodes(void* table, int64_t capacity, const int64_t* nodes, int64_t n,
                  int64_t* entries, cudaStream_t stream);

// One hop's reindexing, over the first *num_edges of max_edges sampled neighbors in
// `rows` (global ids on entry, local indices on return):
//  1. insert_neighbors: insert each id, rows[e] becomes its table slot, and an id new to
//     the table records the first edge e that named it;
//  2. scan_new_nodes: new_pos[e] = how many new ids were first named before edge e
//     (max_edges + 1 entries);
//  3. assign_new_nodes: new id's local index = node_total[0] + new_pos[e]; new_nodes lists
//     the new ids in order of first appearance; writes *hop_edges = *num_edges and
//     node_total[1] = node_total[0] + the number of new nodes (all on the device);
//  4. relabel_rows: rows[e] = local index of its id.
void insert_neighbors(void* table, int64_t capacity, int64_t* rows, int64_t max_edges,
                      const int64_t* num_edges, int64_t num_nodes, DeviceStatus* status,
                      cudaStream_t stream);
size_t scan_new_nodes_workspace_bytes(int64_t max_edges);
void scan_new_nodes(const void* table, const int64_t* rows, int64_t max_edges,
                    const int64_t* num_edges, int64_t* new_pos, void* workspace,
                    size_t workspace_bytes, cudaStream_t stream);
void assign_new_nodes(void* table, const int64_t* rows, int64_t max_edges,
                      const int64_t* num_edges, const int64_t* new_pos, int64_t* node_total,
                      int64_t* new_nodes, int64_t* hop_edges, cudaStream_t stream);
void relabel_rows(const void* table, int64_t* rows, int64_t max_edges, const int64_t* num_edges,
                  cudaStream_t stream);

}  // namespace quiver::cuda
