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

// A uniform double in (0, 1) from two 32-bit draws (53 bits, never 0 or 1).
inline double uniform_open(at::philox_engine& rng) {
  const uint64_t high = rng();  // two statements: a fixed order of the two draws
  const uint64_t low = rng();
  return (static_cast<double>(((high << 32) | low) >> 11) + 0.5) * 0x1.0p-53;
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

}  // namespace quiver::cpu
