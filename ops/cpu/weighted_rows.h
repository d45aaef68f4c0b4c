// Weighted per-row neighbor choice on the CPU (the CUDA twin is ops/cuda/weighted_rows.cu).
// Without replacement the draw is successive sampling: the first pick is edge e with
// probability w_e / W, each next one among the edges left in proportion to their weights,
// drawn at once by Efraimidis-Spirakis keys (key_e = log(u_e) / w_e, the k largest win).
// This is not "inclusion probability proportional to weight" (DGL#6917): a heavy edge's
// inclusion saturates at 1. With replacement: k independent draws, edge e with w_e / W.
#pragma once

#include <ATen/core/PhiloxRNGEngine.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "ops/errors.h"
#include "ops/sampling_rules.h"

namespace quiver::cpu {

// A uniform double in (0, 1) from two 32-bit draws: 52 bits and a half, never 0 or 1 (with
// 53 bits, the largest, 2^53 - 0.5, rounded to 2^53, a 1).
inline double uniform_open(at::philox_engine& rng) {
  const uint64_t high = rng();  // two statements: a fixed order of the two draws
  const uint64_t low = rng();
  return (static_cast<double>(((high << 32) | low) >> 12) + 0.5) * 0x1.0p-52;
}

// Writes `count` offsets in [0, degree) of the row whose weights start at `weights` (CSR
// position `begin`, node `node`, for errors), checking every weight of the row.
inline void weighted_offsets(const float* weights, int64_t begin, int64_t node, int64_t degree,
                             int64_t count, bool replace, at::philox_engine& rng, int64_t* out) {
  for (int64_t j = 0; j < degree; ++j) {
    const float w = weights[j];
    if (!(w > 0.0f) || !std::isfinite(w)) errors::bad_edge_weight(begin + j, w, node);
  }
  if (count == 0) return;
  if (replace) {
    std::vector<double> cumulative(degree);
    double total = 0.0;
    for (int64_t j = 0; j < degree; ++j) cumulative[j] = total += weights[j];
    for (int64_t i = 0; i < count; ++i) {
      const double target = uniform_open(rng) * total;
      const auto hit = std::upper_bound(cumulative.begin(), cumulative.end(), target);
      out[i] = std::min<int64_t>(hit - cumulative.begin(), degree - 1);
    }
    return;
  }
  if (count == degree) {
    std::iota(out, out + count, int64_t{0});
    return;
  }
  std::vector<std::pair<double, int64_t>> keys(degree);
  for (int64_t j = 0; j < degree; ++j) keys[j] = {std::log(uniform_open(rng)) / weights[j], j};
  std::nth_element(keys.begin(), keys.begin() + count, keys.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int64_t i = 0; i < count; ++i) out[i] = keys[i].second;
}

// Draws before a row drawn by prefix sums (weighted_offsets_by_sums) falls back to keys:
// past this many repeats its heaviest edges have all been met.
inline int64_t max_sum_draws(int64_t count) { return 8 * count + 64; }

// Up to this many picks, a row drawn by prefix sums finds an edge among them by a scan.
constexpr int64_t kScannedPicks = 64;

// The same draws as weighted_offsets with the row's inclusive prefix sums `sums` (`degree`
// of them): with replacement `count` independent draws by binary search; without, the first
// `count` distinct edges of a sequence of such draws (the order in which independent draws
// first meet the edges is successive sampling), and, should max_sum_draws pass first, the
// remaining picks by keys among the edges not met yet (successive sampling goes on from any
// prefix as it would have). A position where the sums do not grow raises, and so does a bad
// weight of a row taken whole or of an edge the keys reach (as on the GPU); the sums spare
// reading the weights of the edges the draws pass over.
inline void weighted_offsets_by_sums(const double* sums, const float* weights, int64_t begin,
                                     int64_t node, int64_t degree, int64_t count, bool replace,
                                     at::philox_engine& rng, int64_t* out) {
  auto checked_weight = [&](int64_t j) {
    const float w = weights[j];
    if (!(w > 0.0f) || !std::isfinite(w)) errors::bad_edge_weight(begin + j, w, node);
    return w;
  };
  if (!replace && count == degree) {
    for (int64_t j = 0; j < degree; ++j) checked_weight(j);
    std::iota(out, out + count, int64_t{0});
    return;
  }
  if (count == 0) return;
  const double total = sums[degree - 1];
  if (!(total > 0.0) || !std::isfinite(total)) {
    errors::cumsum_not_increasing(begin + degree - 1, node);
  }
  if (!sums_start_at(sums[0], checked_weight(0))) errors::cumsum_not_per_row(begin, node);
  auto draw = [&]() {
    const double target = sum_draw_target(uniform_open(rng), total);
    const int64_t j = std::min<int64_t>(std::upper_bound(sums, sums + degree, target) - sums,
                                        degree - 1);
    const double low = j == 0 ? 0.0 : sums[j - 1];
    if (!sum_draw_fits(low, target, sums[j], total)) errors::cumsum_not_increasing(begin + j, node);
    return j;
  };
  if (replace) {
    for (int64_t i = 0; i < count; ++i) out[i] = draw();
    return;
  }
  // Which edges were met: a scan of the picks for a few, a flag per edge of the row for more
  // (a scan per draw cost count^2: 15 s for 99,000 picks of a hub of 100,000; a probe).
  const bool flags_met = count > kScannedPicks;
  std::vector<bool> met_flags(flags_met ? degree : 0);
  int64_t met = 0;
  auto was_met = [&](int64_t j) {
    return flags_met ? static_cast<bool>(met_flags[j]) : std::find(out, out + met, j) != out + met;
  };
  for (int64_t d = 0; met < count && d < max_sum_draws(count); ++d) {
    const int64_t j = draw();
    if (was_met(j)) continue;
    if (flags_met) met_flags[j] = true;
    out[met++] = j;
  }
  if (met == count) return;
  std::vector<std::pair<double, int64_t>> keys;
  keys.reserve(degree - met);
  for (int64_t j = 0; j < degree; ++j) {
    if (was_met(j)) continue;
    keys.emplace_back(std::log(uniform_open(rng)) / checked_weight(j), j);
  }
  const int64_t rest = count - met;
  std::nth_element(keys.begin(), keys.begin() + rest, keys.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int64_t i = 0; i < rest; ++i) out[met + i] = keys[i].second;
}

}  // namespace quiver::cpu
