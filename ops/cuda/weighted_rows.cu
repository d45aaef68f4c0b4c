// Weighted row sampling on the GPU (see weighted_rows.h). A group of G lanes samples a row:
// without replacement it keeps the row's best `count` keys in a buffer (registers, one slot
// a lane, when count <= G; else the hop's pick_sets scratch) and offers the rest of the row
// to it G edges at a time; a key enters only if it beats the buffer's smallest, which for
// random keys happens about count * ln(degree / count) times a row. The register path's keys
// are floats (23-bit uniforms): measured on the H200 the double keys cost 7x uniform
// sampling's time. Rows with prefix sums (edge_weight_cumsum) draw by binary search instead,
// at any count (sample_by_sums).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include <curand_philox4x32_x.h>

#include <cfloat>

#include "ops/cuda/device_status.cuh"
#include "ops/internal/launch.cuh"
#include "ops/cuda/row_rules.cuh"
#include "ops/cuda/weighted_rows.h"

namespace cg = cooperative_groups;

namespace quiver::cuda {
namespace {

constexpr int kBlock = 128;
constexpr int kUnroll = 4;

// Philox bits for edge `offset` of the row with Philox stream `stream`: counter (offset,
// stream), so results do not depend on which lane draws. The call's offset folds into the
// key so that successive calls draw afresh.
__device__ inline uint4 edge_bits(uint64_t seed, uint64_t call, uint64_t stream,
                                  int64_t offset) {
  const uint64_t key = seed ^ (call * 0x9E3779B97F4A7C15ull);
  const uint4 counter{static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                      static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  return curand_Philox4x32_10(
      counter, uint2{static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
}

// A uniform double in (0, 1) for edge `offset`: 52 bits and a half, never 0 or 1 (with 53
// bits, the largest rounded to 1).
__device__ inline double edge_uniform(uint64_t seed, uint64_t call, uint64_t stream,
                                      int64_t offset) {
  const uint4 bits = edge_bits(seed, call, stream, offset);
  const uint64_t word = (static_cast<uint64_t>(bits.x) << 32) | bits.y;
  return (static_cast<double>(word >> 12) + 0.5) * 0x1.0p-52;
}

// The same draw as a float in (0, 1), for the register path's float keys: 23 bits, so that
// the largest, (2^23 - 0.5) / 2^23, is a float below 1 (from 24 bits it rounds to 1.0, whose
// key 0 would beat every weight).
__device__ inline float edge_uniform23(uint64_t seed, uint64_t call, uint64_t stream,
                                       int64_t offset) {
  return (static_cast<float>(edge_bits(seed, call, stream, offset).x >> 9) + 0.5f) *
         0x1.0p-23f;
}

// A float key log(u) / w. logf, not __logf: the fast log's absolute error near 1 (about
// 2^-21) can make log(u) zero or positive for u close to 1, a key that ignores the weight.
__device__ inline float float_key(float u, float w) { return logf(u) / w; }

// The `size` largest keys offered, kept in global scratch (`keys`, `offsets`) for rows that
// pick more than G without replacement: slots fill in offer order, then a key enters only
// when it beats the buffer's least, which the group's lanes find together (one lane's scan
// cost `size` loads a key that enters, about size^2 ln(degree / size) a row; a review).
template <int G, typename Group>
struct KeyBuffer {
  double* keys;
  int64_t* offsets;
  int64_t size;
  int64_t filled = 0;
  double least = -DBL_MAX;  // while filling, every key (all are finite) is offered
  int64_t least_at = 0;

  __device__ void find_least(const Group& group) {
    group.sync();  // slots written by other lanes
    double mine = DBL_MAX;
    int64_t at = 0;
    for (int64_t q = group.thread_rank(); q < size; q += G) {
      const double key = keys[q];
      if (key < mine) {
        mine = key;
        at = q;
      }
    }
    least = cg::reduce(group, mine, cg::less<double>());
    least_at = group.shfl(at, __ffs(group.ballot(mine == least)) - 1);
  }

  // Offers each lane's `key` (of row offset `at`; -DBL_MAX offers nothing), lanes in order.
  __device__ void offer(const Group& group, double key, int64_t at) {
    const int lane = group.thread_rank();
    unsigned offered = group.ballot(key > least);
    if (filled < size) {
      const int64_t slot = filled + __popc(offered & ((1u << lane) - 1));
      const bool lands = (offered >> lane & 1u) && slot < size;
      if (lands) {
        keys[slot] = key;
        offsets[slot] = at;
      }
      const unsigned landed = group.ballot(lands);
      filled += __popc(landed);
      offered &= ~landed;
      if (filled < size) return;  // every offer landed
      find_least(group);
    }
    while (offered != 0) {
      const int l = __ffs(offered) - 1;
      offered &= offered - 1;
      const double candidate = group.shfl(key, l);
      const int64_t candidate_at = group.shfl(at, l);
      if (candidate > least) {
        if (lane == 0) {
          keys[least_at] = candidate;
          offsets[least_at] = candidate_at;
        }
        find_least(group);
      }
    }
  }
};

// Counter offsets of a row's draws by prefix sums, apart from its keys' (edge offsets).
constexpr int64_t kSumDrawBase = int64_t{1} << 40;

// A row drawn by its prefix sums (RowRules::weight_sums), the draws of ops/cpu/weighted_rows.h:
// weighted_offsets_by_sums. Lane l makes draw d + l of the row's sequence (a binary search
// for u * total); with replacement each pick is one draw; without, the first `count`
// distinct edges of the sequence, met in draw order, then, past kMaxSumDraws(count), the
// rest by keys among the edges not met. `emit(j, offset)` writes pick j. Past G picks
// without replacement the edges met are an open-addressing set in `met_set` (the row's
// pick_sets scratch, 2 * count entries cleared to -1), and the keys of the rest wait in the
// row's outputs from pick `met` on (`spare_keys`, `spare_offsets`: count entries each,
// each slot read by the lane that then emits it).
template <int G, typename Group, typename Weight, typename Emit>
__device__ void sample_by_sums(const Group& group, const RowRules& rules, const RowTree& tree,
                               int64_t begin, int64_t degree, int64_t count, bool replace,
                               uint64_t seed, uint64_t call, uint64_t stream, Weight&& weight,
                               Emit&& emit, int64_t* met_set, int64_t* spare_keys,
                               int64_t* spare_offsets) {
  const int lane = group.thread_rank();
  const double* sums = rules.weight_sums + begin;
  const double total = sums[degree - 1];
  if (!(total > 0.0) || !isfinite(total)) {
    record_status(rules.status, kCumsumNotIncreasing, begin + degree - 1, tree.node, 0);
    for (int64_t j = lane; j < count; j += G) emit(j, 0);  // placeholders: the batch raises
    return;
  }
  if (!sums_start_at(sums[0], weight(0))) {
    record_status(rules.status, kCumsumNotPerRow, begin, tree.node, 0);
    for (int64_t j = lane; j < count; j += G) emit(j, 0);  // placeholders: the batch raises
    return;
  }
  auto draw = [&](int64_t d) {
    const double target = sum_draw_target(edge_uniform(seed, call, stream, kSumDrawBase + d),
                                          total);
    int64_t lo = 0, hi = degree - 1;  // the first edge whose sum passes the target
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sums[mid] > target) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    const double low = lo == 0 ? 0.0 : sums[lo - 1];
    if (!sum_draw_fits(low, target, sums[lo], total)) {
      record_status(rules.status, kCumsumNotIncreasing, begin + lo, tree.node, 0);
    }
    return lo;
  };
  if (replace) {
    for (int64_t j = lane; j < count; j += G) emit(j, draw(j));
    return;
  }
  const int64_t max_draws = 8 * count + 64;  // as max_sum_draws on the CPU
  if (count > G) {
    // (These rows had taken keys over the whole row, ignoring the sums: O(degree) where the
    // CPU's draws are O(count log degree); a review.)
    const uint64_t capacity = 2 * static_cast<uint64_t>(count);
    auto* cells = reinterpret_cast<unsigned long long*>(met_set);
    auto first_probe = [&](int64_t j) { return mix_node_id(static_cast<uint64_t>(j)) % capacity; };
    auto inserted = [&](int64_t j) {  // false when j was in the set already
      for (uint64_t h = first_probe(j);; h = h + 1 == capacity ? 0 : h + 1) {
        const unsigned long long held =
            atomicCAS(cells + h, ~0ull, static_cast<unsigned long long>(j));
        if (held == ~0ull) return true;
        if (held == static_cast<unsigned long long>(j)) return false;
      }
    };
    auto was_met = [&](int64_t j) {  // (read past L1: other lanes' inserts are atomics)
      for (uint64_t h = first_probe(j);; h = h + 1 == capacity ? 0 : h + 1) {
        const long long held = __ldcg(reinterpret_cast<const long long*>(met_set) + h);
        if (held == -1) return false;
        if (held == j) return true;
      }
    };
    int64_t met = 0;
    for (int64_t d = 0; met < count && d < max_draws; d += G) {
      const int64_t j = draw(d + lane);
      // A repeat within the G draws counts once, at its first lane (the draw order).
      const unsigned same = __match_any_sync(0xffffffffu, static_cast<unsigned long long>(j));
      const bool fresh = __ffs(same) - 1 == lane && inserted(j);
      const unsigned fresh_lanes = group.ballot(fresh);
      const int64_t at = met + __popc(fresh_lanes & ((1u << lane) - 1));
      if (fresh && at < count) emit(at, j);
      met = min(count, met + static_cast<int64_t>(__popc(fresh_lanes)));
    }
    if (met == count) return;
    group.sync();  // the set's inserts seen by every lane's was_met below
    KeyBuffer<G, Group> rest{reinterpret_cast<double*>(spare_keys + met), spare_offsets + met,
                             count - met};
    for (int64_t base = 0; base < degree; base += G) {
      const int64_t j = base + lane;
      rest.offer(group,
                 j < degree && !was_met(j)
                     ? log(edge_uniform(seed, call, stream, j)) / weight(j)
                     : -DBL_MAX,
                 j);
    }
    group.sync();
    for (int64_t q = lane; q < rest.size; q += G) {
      const int64_t offset = rest.offsets[q];  // this lane's slot, before emit overwrites it
      emit(met + q, offset);
    }
    return;
  }
  int64_t held_at = -1;  // lane l < met: the l-th edge met
  int64_t met = 0;
  auto was_met = [&](int64_t j) {
    bool seen = false;
    for (int64_t q = 0; q < met; ++q) seen |= group.shfl(held_at, static_cast<int>(q)) == j;
    return seen;
  };
  for (int64_t d = 0; met < count && d < max_draws; d += G) {
    const int64_t j = draw(d + lane);
    const bool seen = was_met(j);
    const unsigned same = __match_any_sync(0xffffffffu, static_cast<unsigned long long>(j));
    unsigned fresh = group.ballot(!seen && __ffs(same) - 1 == lane);
    while (fresh != 0 && met < count) {
      const int l = __ffs(fresh) - 1;
      fresh &= fresh - 1;
      const int64_t edge = group.shfl(j, l);
      if (lane == met) held_at = edge;
      ++met;
    }
  }
  if (met < count) {
    // Keys for the rest among the edges not met: slots met..count-1 start empty; slots
    // before met (and lanes past count) are never the least. Double keys, as on the CPU:
    // a float log(u) / w is -inf for weights below about 1e-37, which would never beat an
    // empty slot's sentinel and leave it unfilled. In double every key of a positive float
    // weight is finite, so above -DBL_MAX.
    double held = lane >= met && lane < count ? -DBL_MAX : DBL_MAX;
    double least;
    int least_lane;
    auto find_least = [&] {
      least = cg::reduce(group, held, cg::less<double>());
      least_lane = __ffs(group.ballot(held == least)) - 1;
    };
    find_least();
    for (int64_t base = 0; base < degree; base += G) {
      const int64_t j = base + lane;
      const bool skip = was_met(j);
      const double key = j < degree && !skip
                             ? log(edge_uniform(seed, call, stream, j)) / weight(j)
                             : -DBL_MAX;
      unsigned offered = group.ballot(key > least);
      while (offered != 0) {
        const int l = __ffs(offered) - 1;
        offered &= offered - 1;
        const double candidate = group.shfl(key, l);
        if (candidate > least) {
          if (lane == least_lane) {
            held = candidate;
            held_at = base + l;
          }
          find_least();
        }
      }
    }
  }
  if (lane < count) emit(lane, held_at);
}

template <typename index_t, int G>
__global__ void __launch_bounds__(kBlock)
    weighted_rows_kernel(const Csr<index_t> csr, const int64_t* __restrict__ row_begin,
                         const int64_t* __restrict__ row_degree,
                         const int64_t* __restrict__ row_count,
                         const int64_t* __restrict__ row_keys, int64_t num_rows,
                         const HopRule rule, const int64_t* __restrict__ out_offsets,
                         int64_t* __restrict__ neighbors_out, int64_t* __restrict__ edge_ids_out,
                         int64_t* __restrict__ cols_out, const int64_t* col_base_ptr,
                         int64_t* pick_sets, const int64_t* __restrict__ row_fanout) {
  const auto group = cg::tiled_partition<G>(cg::this_thread_block());
  const int lane = group.thread_rank();
  const int64_t col_base = cols_out ? *col_base_ptr : 0;
  const RowRules& rules = rule.rules;
  const uint64_t seed =
      rule.device_key ? static_cast<uint64_t>(rule.device_key[0]) : rule.key.seed;
  const uint64_t call =
      rule.device_key ? static_cast<uint64_t>(rule.device_key[1]) : rule.key.offset;

  constexpr int kGroups = kBlock / G;
  for (int64_t r = blockIdx.x * int64_t{kGroups} + threadIdx.x / G; r < num_rows;
       r += int64_t{gridDim.x} * kGroups) {
    const int64_t count = row_count[r];
    if (count == 0) continue;
    const int64_t begin = row_begin[r];
    const int64_t degree = row_degree[r];
    const int64_t first = out_offsets[r];
    const uint64_t stream = rule.stream_base + r;
    const int64_t i = rules.relations.node_index(r);  // the row's frontier node
    const int64_t fanout = row_fanout ? row_fanout[r] : rule.fanout;
    const RowTree tree = row_tree(rules, row_keys[i]);
    const float* weights = rules.edge_weight + begin;

    auto weight = [&](int64_t j) {
      const float w = weights[j];
      if (!(w > 0.0f) || !isfinite(w)) {
        record_status(rules.status, kBadEdgeWeight, begin + j, tree.node,
                      __double_as_longlong(static_cast<double>(w)));
        return 1.0f;  // the error is raised at the batch's end
      }
      return w;
    };
    // Key parts of edge j: its uniform's bits and its (checked) weight.
    auto j_key = [&](int64_t j) { return make_float2(edge_uniform23(seed, call, stream, j), weight(j)); };
    auto fast_key = [](float2 uw) { return float_key(uw.x, uw.y); };
    auto emit = [&](int64_t j, int64_t offset) {
      const int64_t pos = begin + offset;
      const int64_t neighbor = rule_neighbor_key(
          rules, tree, static_cast<int64_t>(csr.indices[pos]), pos, csr.num_nodes);
      neighbors_out[first + j] = neighbor;
      edge_ids_out[first + j] = csr.edge_ids ? csr.edge_ids[pos] : pos;
      if (cols_out) cols_out[first + j] = col_base + i;
    };

    if (fanout < 0 || (!rule.replace && count == degree)) {
      for (int64_t j = lane; j < count; j += G) {
        weight(j);
        emit(j, j);
      }
      continue;
    }

    // (pick_sets is there for every row past G picks without replacement)
    int64_t* row_scratch = pick_sets != nullptr ? pick_sets + 2 * first : nullptr;
    if (rules.weight_sums != nullptr) {
      sample_by_sums<G>(group, rules, tree, begin, degree, count, rule.replace, seed, call, stream,
                        weight, emit, row_scratch, neighbors_out + first, edge_ids_out + first);
      continue;
    }

    if (rule.replace) {
      // Each lane holds one pick's target in the row's cumulative weight and walks the row
      // with the group, G edges a step, until the running sum passes it.
      double total = 0.0;
      for (int64_t j = lane; j < degree; j += G) total += weight(j);
      total = cg::reduce(group, total, cg::plus<double>());
      for (int64_t batch = 0; batch < count; batch += G) {
        const int64_t pick = batch + lane;
        const double target =
            pick < count ? edge_uniform(seed, call, stream, pick) * total : DBL_MAX;
        int64_t found = -1;
        double running = 0.0;
        for (int64_t base = 0; base < degree; base += G) {
          const int64_t j = base + lane;
          const double w = j < degree ? static_cast<double>(weight(j)) : 0.0;
          const double ends = cg::inclusive_scan(group, w, cg::plus<double>()) + running;
          for (int l = 0; l < G; ++l) {
            const double end_l = group.shfl(ends, l);
            if (found < 0 && base + l < degree && target < end_l) found = base + l;
          }
          running = group.shfl(ends, G - 1);
          if (group.all(found >= 0 || pick >= count)) break;
        }
        // Rounding can leave a target at the very top: the last edge takes it.
        if (pick < count) emit(pick, found >= 0 ? found : degree - 1);
      }
      continue;
    }

    // Without replacement: the `count` largest keys log(u) / w of the row. Up to G picks
    // (every fanout up to 32) the buffer is in registers, lane l holding slot l, and the
    // smallest key is found by a group reduction.
    if (count <= G) {
      float held = lane < count ? fast_key(j_key(lane)) : FLT_MAX;
      int64_t held_at = lane;
      float least;
      int least_lane;
      auto find_least = [&] {
        least = cg::reduce(group, held, cg::less<float>());
        least_lane = __ffs(group.ballot(held == least)) - 1;
      };
      find_least();
      // kUnroll chunks of G keys at once: independent Philox chains keep a long row's
      // lanes busy (a row's time is its degree / G steps, and the hop waits for its
      // longest row); then each chunk is offered to the buffer in order.
      for (int64_t base = count; base < degree; base += kUnroll * G) {
        float keys[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t j = base + u * G + lane;
          keys[u] = j < degree ? fast_key(j_key(j)) : -FLT_MAX;
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          unsigned offered = group.ballot(keys[u] > least);
          while (offered != 0) {
            const int l = __ffs(offered) - 1;
            offered &= offered - 1;
            const float candidate = group.shfl(keys[u], l);
            if (candidate > least) {
              if (lane == least_lane) {
                held = candidate;
                held_at = base + u * G + l;
              }
              find_least();
            }
          }
        }
      }
      if (lane < count) emit(lane, held_at);
      continue;
    }
    // Without replacement: the `count` largest keys log(u) / w of the row, kept in the row's
    // pick_sets scratch.
    KeyBuffer<G, decltype(group)> best{reinterpret_cast<double*>(row_scratch), row_scratch + count,
                                      count};
    for (int64_t base = 0; base < degree; base += G) {
      const int64_t j = base + lane;
      const double key =
          j < degree ? log(edge_uniform(seed, call, stream, j)) / weight(j) : -DBL_MAX;
      best.offer(group, key, j);
    }
    group.sync();
    for (int64_t j = lane; j < count; j += G) emit(j, best.offsets[j]);
  }
}

template <typename index_t, int G>
cudaError_t launch_weighted_rows(const Csr<index_t>& csr, const RowPlan& plan,
                                 const HopRule& rule, const HopOutput& out, cudaStream_t stream) {
  weighted_rows_kernel<index_t, G><<<blocks_for(plan.num_rows, kBlock / G), kBlock, 0, stream>>>(
      csr, plan.begin, plan.degree, plan.count, plan.nodes, plan.num_rows, rule, out.offsets,
      out.neighbors, out.edge_ids, out.cols, out.col_base, out.pick_sets, plan.fanout);
  QUIVER_LAUNCH_TRY();
  return cudaSuccess;
}

}  // namespace

template <typename index_t>
cudaError_t sample_weighted_rows(const Csr<index_t>& csr, const RowPlan& plan,
                                 const HopRule& rule, const HopOutput& out, cudaStream_t stream) {
  // A warp a row whatever the fanout: unlike uniform rows, a weighted row reads its whole
  // neighbor list, and rows of thousands of neighbors set the hop's time.
  return launch_weighted_rows<index_t, 32>(csr, plan, rule, out, stream);
}

template cudaError_t sample_weighted_rows<int32_t>(const Csr<int32_t>&, const RowPlan&,
                                                   const HopRule&, const HopOutput&, cudaStream_t);
template cudaError_t sample_weighted_rows<int64_t>(const Csr<int64_t>&, const RowPlan&,
                                                   const HopRule&, const HopOutput&, cudaStream_t);

}  // namespace quiver::cuda
