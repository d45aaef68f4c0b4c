// Temporal per-row rules on the CPU (the CUDA twin is in ops/cuda/temporal_rows.cu): a row
// sorted by edge time admits the prefix of edges at or before its tree's seed time (strictly
// before with strict_time); strategy "uniform" samples that prefix like any row, "last"
// takes its most recent `count` edges.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace quiver::cpu {

// How many of a row's `degree` time-sorted edges are admitted for seed time `t`.
inline int64_t admitted_prefix(const int64_t* times, int64_t degree, int64_t t, bool strict) {
  const int64_t* end = strict ? std::lower_bound(times, times + degree, t)
                              : std::upper_bound(times, times + degree, t);
  return end - times;
}

// The offsets of the last `count` of `degree` admitted edges, oldest first.
inline void last_offsets(int64_t degree, int64_t count, int64_t* out) {
  std::iota(out, out + count, degree - count);
}

}  // namespace quiver::cpu
