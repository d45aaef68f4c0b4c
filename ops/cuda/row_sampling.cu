// Per-row neighbor sampling on the GPU: planning (degrees and output counts), the offsets
// scan, and the sampling itself. Rows are spread over groups of G lanes so that many rows
// are in flight per block; the lanes of a group read a row's picks together, which
// coalesces reads of small rows and of "take all" rows (essential over PCIe in UVA mode).
#include <cooperative_groups.h>
#include <curand_kernel.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "ops/cuda/device_status.cuh"
#include "ops/internal/launch.cuh"
#include "ops/cuda/row_gather.h"
#include "ops/cuda/row_rules.cuh"
#include "ops/cuda/row_sampling.h"
#include "ops/cuda/weighted_rows.h"
#include "ops/sampling_rules.h"

namespace cg = cooperative_groups;

namespace quiver::cuda {
namespace {

constexpr int kPlanThreads = 256;
constexpr int kBlock = 128;

template <typename index_t>
// Kernels take their pointers as separate __restrict__ parameters (the launchers unpack the
// argument structs): only then may the compiler issue the loads of many rows before their
// stores, the parallelism that hides memory latency, over PCIe in UVA mode above all.
__global__ void plan_rows_kernel(const Csr<index_t> csr, const int64_t* __restrict__ nodes,
                                 const int64_t* live, int64_t num_rows, int64_t fanout,
                                 bool replace, const RowRules rules, PlanChecks checks,
                                 int64_t* __restrict__ row_begin, int64_t* __restrict__ row_degree,
                                 int64_t* __restrict__ row_count, int64_t* row_cached,
                                 int64_t* __restrict__ row_fanout, DeviceStatus* status) {
  if (checks.csr_ends && blockIdx.x == 0 && threadIdx.x == 0) {
    const int64_t first = csr.indptr[0];
    const int64_t last = csr.indptr[csr.num_nodes];
    if (first != 0 || last != csr.num_edges) record_status(status, kCsrEnds, 0, first, last);
  }
  const RelationRows& relations = rules.relations;
  const bool sliced = relations.active();
  const int64_t live_nodes = live ? live[1] - live[0] : num_rows;
  QUIVER_GRID_LOOP(r, num_rows) {
    int64_t begin = 0, degree = 0;  // rows past the live ones yield nothing
    int64_t fanout_here = fanout;
    const int64_t i = relations.node_index(r);
    const bool is_live = i < live_nodes;
    const RowTree tree = row_tree(rules, is_live ? nodes[i] : 0);
    if (is_live) {
      const int64_t node = tree.node;
      if (node < 0 || node >= csr.num_nodes) {
        record_status(status, checks.nodes_are_seeds ? kSeedOutOfRange : kNeighborOutOfRange, i,
                      node, 0);
      } else {
        begin = csr.indptr[node];
        const int64_t end = csr.indptr[node + 1];
        if (0 <= begin && begin <= end && end <= csr.num_edges) {
          degree = end - begin;
          if (sliced) {
            fanout_here = relation_slice(relations, rules.hop_fanouts, csr.edge_ids, node,
                                         r - i * relations.rows_per_node, begin, degree);
          }
          if (rules.edge_time != nullptr) {
            degree = admitted_prefix(rules.edge_time + begin, degree, tree.seed_time,
                                     rules.strict_time);
          }
        } else {
          record_status(status, kRowOutOfBounds, node, begin, end);
          begin = 0;
        }
      }
    }
    if (csr.cached_starts != nullptr || csr.cached_starts32 != nullptr) {
      int64_t cached = -1;
      if (degree > 0) {
        cached = csr.cached_starts != nullptr
                     ? csr.cached_starts[tree.node]
                     : static_cast<int64_t>(csr.cached_starts32[tree.node]);
        if (cached >= 0 && cached + degree > csr.num_cached) {
          record_status(status, kCachedRowOutOfBounds, tree.node, cached, degree);
          cached = -1;
        }
      }
      row_cached[r] = cached < 0 ? -1 : cached;
    }
    row_begin[r] = begin;
    row_degree[r] = degree;
    row_count[r] = sampled_count(degree, fanout_here, replace);
    if (row_fanout != nullptr) row_fanout[r] = fanout_here;
  }
}

__device__ inline uint64_t uniform_below(curandStatePhilox4_32_10_t* state, uint64_t n) {
  const uint64_t high = curand(state);  // two statements: a fixed order of the two draws
  const uint64_t low = curand(state);
  return scale_to_range((high << 32) | low, n);
}

template <typename index_t, int G>
__global__ void __launch_bounds__(kBlock)
    sample_rows_kernel(const Csr<index_t> csr, const int64_t* __restrict__ row_begin,
                       const int64_t* __restrict__ row_degree,
                       const int64_t* __restrict__ row_count,
                       const int64_t* __restrict__ row_cached, int64_t num_rows,
                       const HopRule rule, const int64_t* __restrict__ out_offsets,
                       int64_t* __restrict__ neighbors_out, int64_t* edge_ids_out,
                       int64_t* __restrict__ cols_out, const int64_t* col_base_ptr,
                       int64_t* pick_sets, const int64_t* __restrict__ row_order,
                       const int64_t* __restrict__ row_keys,
                       const int64_t* __restrict__ row_fanout) {
  constexpr int kGroups = kBlock / G;
  const int64_t col_base = cols_out ? *col_base_ptr : 0;
  __shared__ int64_t shared_picks[kGroups][kSharedPicks];
  const auto group = cg::tiled_partition<G>(cg::this_thread_block());
  const int lane = group.thread_rank();
  const int slot = threadIdx.x / G;
  const uint64_t seed =
      rule.device_key ? static_cast<uint64_t>(rule.device_key[0]) : rule.key.seed;
  const uint64_t offset =
      rule.device_key ? static_cast<uint64_t>(rule.device_key[1]) : rule.key.offset;

  for (int64_t visit = blockIdx.x * int64_t{kGroups} + slot; visit < num_rows;
       visit += int64_t{gridDim.x} * kGroups) {
    const int64_t r = row_order ? row_order[visit] : visit;
    const int64_t count = row_count[r];
    if (count == 0) continue;
    const int64_t i = rule.rules.relations.node_index(r);  // the row's frontier node
    const int64_t fanout = row_fanout ? row_fanout[r] : rule.fanout;
    const int64_t begin = row_begin[r];
    const int64_t degree = row_degree[r];
    const int64_t first = out_offsets[r];
    // A cached row reads its neighbors from GPU memory; edge ids still name CSR positions.
    const index_t* neighbors = csr.indices + begin;
    if (row_cached != nullptr && row_cached[r] >= 0) neighbors = csr.cached_indices + row_cached[r];

    // sample_subgraph's rows have no rules; neighbor_sample's may (row_rules.cuh).
    const bool ruled = rule.rules.tree_nodes > 0 || rule.rules.edge_time != nullptr;
    const RowTree tree = ruled ? row_tree(rule.rules, row_keys[i]) : RowTree{};
    auto emit = [&](int64_t j, int64_t offset) {
      const int64_t pos = begin + offset;
      int64_t neighbor = static_cast<int64_t>(neighbors[offset]);
      if (ruled) neighbor = rule_neighbor_key(rule.rules, tree, neighbor, pos, csr.num_nodes);
      neighbors_out[first + j] = neighbor;
      edge_ids_out[first + j] = csr.edge_ids ? csr.edge_ids[pos] : pos;
      if (cols_out) cols_out[first + j] = col_base + i;
    };

    if (fanout < 0 || (!rule.replace && count == degree)) {
      for (int64_t j = lane; j < count; j += G) emit(j, j);
    } else if (rule.rules.last) {
      for (int64_t j = lane; j < count; j += G) emit(j, degree - count + j);
    } else if (rule.replace) {
      for (int64_t j = lane; j < count; j += G) {
        curandStatePhilox4_32_10_t state;
        curand_init(seed, rule.stream_base + r, offset + 4 * j, &state);
        emit(j, static_cast<int64_t>(uniform_below(&state, degree)));
      }
    } else {
      // Floyd's algorithm: pick m is a draw below degree - count + m + 1, replaced by that
      // bound less one when an earlier pick took it (every k-subset equally likely). Its
      // draw is the m-th pair of the row's Philox stream, so the lanes draw a row's picks at
      // once and one lane only settles collisions (a scan of shared memory). On the H200 a
      // 1024-seed hop of fanout 15 took 11.7 us with one lane drawing, 9.0 with all; the
      // [15, 10, 5] batch's three hops 70 against 50. Beyond
      // kSharedPicks one lane draws and settles, the picks waiting in the edge-id output
      // (each slot later overwritten by the lane that reads it) and membership tested in the
      // row's open-addressing set (capacity 2k, so probes stay short) instead of a scan.
      const bool small = count <= kSharedPicks;
      int64_t* picks = small ? shared_picks[slot] : edge_ids_out + first;
      if (small) {
        for (int64_t m = lane; m < count; m += G) {
          curandStatePhilox4_32_10_t state;
          curand_init(seed, rule.stream_base + r, offset + 2 * m, &state);
          picks[m] = static_cast<int64_t>(uniform_below(&state, degree - count + m + 1));
        }
        group.sync();
        if (lane == 0) {
          for (int64_t m = 1; m < count; ++m) {
            const int64_t t = picks[m];
            for (int64_t q = 0; q < m; ++q) {
              if (picks[q] == t) {
                picks[m] = degree - count + m;  // never chosen before: every pick is below it
                break;
              }
            }
          }
        }
      } else if (lane == 0) {
        curandStatePhilox4_32_10_t state;
        curand_init(seed, rule.stream_base + r, offset, &state);
        int64_t* set = pick_sets + 2 * first;
        const uint64_t capacity = 2 * static_cast<uint64_t>(count);
        // Inserts v unless present; true when it was present.
        auto seen_or_insert = [&](int64_t v) {
          uint64_t h = mix_node_id(static_cast<uint64_t>(v)) % capacity;
          while (set[h] != -1) {
            if (set[h] == v) return true;
            h = h + 1 == capacity ? 0 : h + 1;
          }
          set[h] = v;
          return false;
        };
        for (int64_t j = degree - count, m = 0; j < degree; ++j, ++m) {
          int64_t t = static_cast<int64_t>(uniform_below(&state, j + 1));
          if (seen_or_insert(t)) {
            t = j;  // never chosen before: every earlier pick is below j
            seen_or_insert(t);
          }
          picks[m] = t;
        }
      }
      group.sync();
      for (int64_t j = lane; j < count; j += G) emit(j, picks[j]);
      group.sync();  // the group's shared picks are reused by its next row
    }
  }
}

template <typename index_t, int G>
cudaError_t launch_sample_rows(const Csr<index_t>& csr, const RowPlan& plan, const HopRule& rule,
                               const HopOutput& out, cudaStream_t stream) {
  sample_rows_kernel<index_t, G><<<blocks_for(plan.num_rows, kBlock / G), kBlock, 0, stream>>>(
      csr, plan.begin, plan.degree, plan.count, plan.cached, plan.num_rows, rule, out.offsets,
      out.neighbors,
      out.edge_ids, out.cols, out.col_base, out.pick_sets, plan.order, plan.nodes, plan.fanout);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

}  // namespace

template <typename index_t>
cudaError_t plan_rows(const Csr<index_t>& csr, const RowPlan& plan, const HopRule& rule,
                      PlanChecks checks, DeviceStatus* status, cudaStream_t stream) {
  plan_rows_kernel<index_t><<<blocks_for(plan.num_rows, kPlanThreads), kPlanThreads, 0, stream>>>(
      csr, plan.nodes, plan.live, plan.num_rows, rule.fanout, rule.replace, rule.rules, checks,
      plan.begin, plan.degree, plan.count, plan.cached, plan.fanout, status);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

namespace {

// counts[0..n), then a 0: scanned exclusively, the n + 1 offsets, offsets[0] = 0 included,
// in one CUB call (a memset of offsets[0] before an inclusive scan was one more graph node,
// which cost about 4 us of each hop's critical path on the H200).
struct CountsThenZero {
  const int64_t* counts;
  int64_t n;
  __device__ int64_t operator()(int64_t i) const { return i < n ? counts[i] : 0; }
};

auto counts_then_zero(const int64_t* counts, int64_t n) {
  return thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0),
                                         CountsThenZero{counts, n});
}

}  // namespace

size_t offsets_workspace_bytes(int64_t n) {
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, counts_then_zero(nullptr, n),
                                static_cast<int64_t*>(nullptr), n + 1);
  return bytes;
}

cudaError_t offsets_from_counts(const int64_t* values, int64_t n, int64_t* offsets, void* workspace,
                                size_t workspace_bytes, cudaStream_t stream) {
  return cub::DeviceScan::ExclusiveSum(workspace, workspace_bytes, counts_then_zero(values, n),
                                       offsets, n + 1, stream);
}

template <typename index_t>
cudaError_t sample_rows(const Csr<index_t>& csr, const RowPlan& plan, const HopRule& rule,
                        const HopOutput& out, cudaStream_t stream) {
  if (rule.rules.edge_weight != nullptr) return sample_weighted_rows(csr, plan, rule, out, stream);
  // Enough lanes per row for the fanout, so that small fanouts keep more rows in flight.
  if (rule.fanout >= 0 && rule.fanout <= 8)
    return launch_sample_rows<index_t, 8>(csr, plan, rule, out, stream);
  if (rule.fanout >= 0 && rule.fanout <= 16)
    return launch_sample_rows<index_t, 16>(csr, plan, rule, out, stream);
  return launch_sample_rows<index_t, 32>(csr, plan, rule, out, stream);
}

namespace {

__global__ void iota_kernel(int64_t* values, int64_t n) {
  QUIVER_GRID_LOOP(i, n) { values[i] = i; }
}

}  // namespace

namespace {

__global__ void tree_keys_kernel(const int64_t* seeds, int64_t n, int64_t tree_nodes,
                                 int64_t* keys, DeviceStatus* status) {
  QUIVER_GRID_LOOP(i, n) {
    int64_t seed = seeds[i];
    if (seed < 0 || seed >= tree_nodes) {
      record_status(status, kSeedOutOfRange, i, seed, 0);
      seed = 0;
    }
    keys[i] = i * tree_nodes + seed;
  }
}

}  // namespace

cudaError_t tree_keys(const int64_t* seeds, int64_t n, int64_t tree_nodes, int64_t* keys,
                      DeviceStatus* status, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  tree_keys_kernel<<<blocks_for(n, kPlanThreads), kPlanThreads, 0, stream>>>(seeds, n, tree_nodes,
                                                                           keys, status);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

size_t row_order_workspace_bytes(int64_t num_rows, int end_bit) {
  // The same sort of int64 pairs as the feature gather's position order.
  return position_order_workspace_bytes(num_rows, end_bit);
}

cudaError_t order_rows_by_begin(const RowPlan& plan, int end_bit, int64_t* sorted_begin,
                                int64_t* rows, int64_t* order, void* workspace,
                                size_t workspace_bytes, cudaStream_t stream) {
  if (plan.num_rows == 0) return cudaSuccess;
  iota_kernel<<<blocks_for(plan.num_rows, kPlanThreads), kPlanThreads, 0, stream>>>(
      rows, plan.num_rows);
  QUIVER_LAUNCH_TRY();
  return cub::DeviceRadixSort::SortPairs(workspace, workspace_bytes, plan.begin, sorted_begin,
                                         rows, order, plan.num_rows, 0, end_bit, stream);
}

#define QUIVER_INSTANTIATE(index_t)                                                              \
  template cudaError_t plan_rows<index_t>(const Csr<index_t>&, const RowPlan&, const HopRule&,   \
                                          PlanChecks, DeviceStatus*, cudaStream_t);              \
  template cudaError_t sample_rows<index_t>(const Csr<index_t>&, const RowPlan&, const HopRule&, \
                                            const HopOutput&, cudaStream_t);
QUIVER_INSTANTIATE(int32_t)
QUIVER_INSTANTIATE(int64_t)
#undef QUIVER_INSTANTIATE

}  // namespace quiver::cuda
