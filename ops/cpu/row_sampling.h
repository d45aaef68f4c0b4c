// Per-row neighbor choice on the CPU, the stage shared by the one-hop and multi-hop CPU
// samplers (the CUDA twin is ops/cuda/row_sampling.cu; both follow ops/sampling_rules.h).
// Randomness is counter-based (Philox, keyed by one draw from PyTorch's CPU generator and
// indexed by the node's position), so results do not depend on thread scheduling.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/PhiloxRNGEngine.h>
#include <c10/util/flat_hash_map.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <numeric>

#include "ops/errors.h"
#include "ops/sampling_rules.h"

namespace quiver::cpu {

// One draw from `generator`, else from PyTorch's default CPU generator: torch.manual_seed
// reproduces a call, and successive calls differ because the generator advances.
inline uint64_t draw_philox_key(const std::optional<at::Generator>& generator) {
  auto* gen = at::get_generator_or_default<at::CPUGeneratorImpl>(
      generator, at::detail::getDefaultCPUGenerator());
  std::lock_guard<std::mutex> lock(gen->mutex_);
  return gen->random64();
}

// Uniform integer in [0, n) from two 32-bit draws, high word first.
inline uint64_t uniform_below(at::philox_engine& rng, uint64_t n) {
  const uint64_t high = rng();  // two statements: a fixed order of the two draws
  const uint64_t low = rng();
  return scale_to_range((high << 32) | low, n);
}

// Above this many picks, Floyd's membership test uses a hash set instead of a scan.
constexpr int64_t kLinearScanPicks = 64;

// Writes sampled_count(degree, fanout, replace) offsets in [0, degree) to `out`.
// Without replacement this is Floyd's algorithm: every k-subset is equally likely.
inline void sample_offsets(int64_t degree, int64_t fanout, bool replace, at::philox_engine& rng,
                           int64_t* out) {
  const int64_t picks = sampled_count(degree, fanout, replace);
  if (picks == 0) return;
  if (replace && fanout >= 0) {
    for (int64_t i = 0; i < picks; ++i) out[i] = static_cast<int64_t>(uniform_below(rng, degree));
    return;
  }
  if (picks == degree) {
    std::iota(out, out + picks, int64_t{0});
    return;
  }
  if (picks <= kLinearScanPicks) {
    for (int64_t j = degree - picks, m = 0; j < degree; ++j, ++m) {
      int64_t t = static_cast<int64_t>(uniform_below(rng, j + 1));
      if (std::find(out, out + m, t) != out + m) t = j;
      out[m] = t;
    }
    return;
  }
  ska::flat_hash_set<int64_t> chosen;
  chosen.reserve(picks);
  for (int64_t j = degree - picks, m = 0; j < degree; ++j, ++m) {
    int64_t t = static_cast<int64_t>(uniform_below(rng, j + 1));
    if (!chosen.insert(t).second) {
      t = j;
      chosen.insert(t);
    }
    out[m] = t;
  }
}

// This host's memory in bytes (0 where it cannot tell).
inline int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

// Refuses an output of `count` items of `bytes_each` bytes that would not fit in this
// host's memory: Linux grants such an allocation and kills the process as it fills it, and
// the allocator's own message names neither the argument nor its value. `what` names the
// output and what asked for it; `advice` says what to change.
inline void check_fits_host_memory(int64_t count, int64_t bytes_each, const std::string& what,
                                   const char* advice) {
  static const int64_t memory = host_memory_bytes();
  TORCH_CHECK_VALUE(memory == 0 || count <= memory / bytes_each, what, " would take ",
                    saturating_mul(count >> 10, bytes_each) >> 10, " MiB, more than this host's ",
                    memory >> 20, " MiB of memory: ", advice);
}

// ends[i] = counts[0] + ... + counts[i] over n rows of hop `hop` (-1: sample_neighbors),
// raising before any sum passes kMaxHopEdges, so that none can wrap, and when the hop's
// output (`bytes_per_edge` a sampled edge) would not fit in this host's memory: Linux would
// grant the allocation and then kill the process as it filled it (a huge fanout with
// replacement). Returns the total.
inline int64_t prefix_counts(const int64_t* counts, int64_t n, int64_t* ends, int64_t hop,
                             int64_t bytes_per_edge) {
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (counts[i] > kMaxHopEdges - total) {
      errors::batch_too_large(errors::hop_edges_name(hop), saturating_add(total, counts[i]),
                              kMaxHopEdges);
    }
    total += counts[i];
    ends[i] = total;
  }
  check_fits_host_memory(total, bytes_per_edge,
                         errors::hop_edges_name(hop) + " (" + std::to_string(total) + " edges)",
                         "sample fewer seeds per batch or use a smaller fanout");
  return total;
}

// The CSR row of `node`, checked against the index array it must lie in.
struct RowSpan {
  int64_t begin;
  int64_t degree;
};
inline RowSpan checked_row(const int64_t* indptr, int64_t node, int64_t num_edges) {
  const int64_t begin = indptr[node];
  const int64_t end = indptr[node + 1];
  if (!(0 <= begin && begin <= end && end <= num_edges)) {
    errors::row_out_of_bounds(node, begin, end, num_edges);
  }
  return {begin, end - begin};
}

}  // namespace quiver::cpu
