// The CPU row gather, the stage shared by gather_rows (one table) and gather_tiered_rows
// (rows split over tiers, looked up through a position table). Every tensor is on the CPU:
// the dispatcher picks the CPU kernel only when no argument is a CUDA tensor.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstring>
#include <optional>
#include <vector>

#include "ops/checks.h"

namespace quiver::cpu {
namespace detail {

// Bytes copied per parallel task: enough to amortize scheduling, small enough to balance.
constexpr int64_t kBytesPerTask = 1 << 18;

struct HostTier {
  const char* rows;
  int64_t begin;
  int64_t end;
};

// Rows are copied this many rows after the cache is asked for them. One thread copying
// random rows in turn waits for each row's first miss with the memory system otherwise
// idle; asking ahead keeps several misses in flight. 110,000 rows of 400 bytes, a 1 GB
// table (docs/runs/2026-11-22-h200x2-cpu-row-prefetch.log): on the 2-core machine a gather
// 12.9-16.1 -> 5.2-9.0 ms and a scatter 5.9-6.3 -> 3.0-5.0 ms; on a 32-core GPU host the
// scatter 35-37 -> 6.7-8.4 ms, the gather 24 -> 18 ms on 32 threads (no change on 4 or
// 16). 4 and 16 rows ahead measured no better than 8. The staged host reads
// (ops/cuda/gather_tiered_rows.cpp) ask ahead the same way.
constexpr int64_t kRowsAhead = 8;

template <bool kForWrite>
inline void prefetch_row(const char* row, int64_t row_bytes) {
  for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(row + b, kForWrite ? 1 : 0, 0);
}

template <typename id_t, typename pos_t>
void gather_kernel(const std::vector<HostTier>& tiers, int64_t row_bytes, const pos_t* positions,
                   int64_t num_ids_allowed, const id_t* ids, int64_t num_ids, char* out) {
  const int64_t tier_end = tiers.back().end;
  const int64_t grain = std::max<int64_t>(1, kBytesPerTask / std::max<int64_t>(row_bytes, 1));
  // Where row `id`'s bytes are; null for a bad id or position (the caller raises).
  const auto source = [&](int64_t id) -> const char* {
    if (id < 0 || id >= num_ids_allowed) return nullptr;
    const int64_t pos = positions ? static_cast<int64_t>(positions[id]) : id;
    if (pos < 0 || pos >= tier_end) return nullptr;
    size_t k = 0;
    while (pos >= tiers[k].end) ++k;
    return tiers[k].rows + (pos - tiers[k].begin) * row_bytes;
  };
  at::parallel_for(0, num_ids, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      if (i + kRowsAhead < hi) {
        const char* ahead = source(static_cast<int64_t>(ids[i + kRowsAhead]));
        if (ahead != nullptr) prefetch_row<false>(ahead, row_bytes);
      }
      const int64_t id = static_cast<int64_t>(ids[i]);
      const char* row = source(id);
      if (row == nullptr) {
        if (id < 0 || id >= num_ids_allowed) errors::id_out_of_range("ids", i, id, num_ids_allowed);
        errors::position_out_of_range(id, positions ? static_cast<int64_t>(positions[id]) : id,
                                      tier_end);
      }
      std::memcpy(out + i * row_bytes, row, row_bytes);
    }
  });
}

}  // namespace detail

// Rows `ids` of `tiers` (checked by the caller) into `out`, a contiguous CPU tensor of
// rows_like(tiers[0], ids.numel()) and the tiers' dtype (checked by the caller too). For
// callers that reuse a buffer: a fresh large tensor pays its page faults (and the kernel's
// zeroing of each page) on first write, several times the copy itself.
inline void gather_from_tiers_into(at::ArrayRef<at::Tensor> tiers,
                                   const std::optional<at::Tensor>& positions,
                                   const at::Tensor& ids, at::Tensor& out) {
  if (out.numel() == 0) {
    if (row_bytes_of(tiers[0]) == 0) check_ids_of_empty_rows(tiers, positions, ids);
    return;
  }
  const int64_t row_bytes = out.nbytes() / ids.numel();
  std::vector<detail::HostTier> host_tiers;
  int64_t begin = 0;
  for (const at::Tensor& t : tiers) {
    host_tiers.push_back({static_cast<const char*>(t.const_data_ptr()), begin, begin + t.size(0)});
    begin += t.size(0);
  }
  const int64_t num_ids_allowed = tiered_id_count(tiers, positions);
  auto* dst = static_cast<char*>(out.mutable_data_ptr());
  AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "gather_from_tiers", [&] {
    using id_t = index_t;
    const id_t* ids_p = ids.const_data_ptr<id_t>();
    if (!positions) {
      detail::gather_kernel<id_t, int64_t>(host_tiers, row_bytes, nullptr, num_ids_allowed, ids_p,
                                           ids.numel(), dst);
    } else if (positions->scalar_type() == at::kInt) {
      detail::gather_kernel<id_t, int32_t>(host_tiers, row_bytes,
                                           positions->const_data_ptr<int32_t>(), num_ids_allowed,
                                           ids_p, ids.numel(), dst);
    } else {
      detail::gather_kernel<id_t, int64_t>(host_tiers, row_bytes,
                                           positions->const_data_ptr<int64_t>(), num_ids_allowed,
                                           ids_p, ids.numel(), dst);
    }
  });
}

// out[where[i]] = rows[i] for every row i: the inverse of a gather, in parallel. Every
// tensor contiguous on the CPU, `where` int64 indices into out (checked by the caller), out
// and rows of one row size. For the distributed gather's last step, where index_copy_
// (element by element) took 5.3-9.2 ms against 2.9 ms for these whole-row copies, asked
// for ahead: 110,000 rows of 400 bytes, 2 threads.
inline void scatter_rows_into(const at::Tensor& rows, const at::Tensor& where, at::Tensor& out) {
  const int64_t n = where.numel();
  if (n == 0) return;
  const int64_t row_bytes = rows.nbytes() / n;
  const char* src = static_cast<const char*>(rows.const_data_ptr());
  const int64_t* to = where.const_data_ptr<int64_t>();
  auto* dst = static_cast<char*>(out.mutable_data_ptr());
  const int64_t grain =
      std::max<int64_t>(1, detail::kBytesPerTask / std::max<int64_t>(row_bytes, 1));
  at::parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      if (i + detail::kRowsAhead < hi) {
        detail::prefetch_row<true>(dst + to[i + detail::kRowsAhead] * row_bytes, row_bytes);
      }
      std::memcpy(dst + to[i] * row_bytes, src + i * row_bytes, row_bytes);
    }
  });
}

// Rows `ids` of `tiers` (checked by the caller), as a new CPU tensor.
inline at::Tensor gather_from_tiers(at::ArrayRef<at::Tensor> tiers,
                                    const std::optional<at::Tensor>& positions,
                                    const at::Tensor& ids) {
  at::Tensor out = at::empty(rows_like(tiers[0], ids.numel()), tiers[0].options());
  gather_from_tiers_into(tiers, positions, ids, out);
  return out;
}

}  // namespace quiver::cpu
