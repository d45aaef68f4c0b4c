// CPU entry point of sample_negatives: uniform draws per source, redrawn while they are
// true edges (ops/cpu/row_sampling.h: the Philox streams and row checks of the samplers).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/cpu/row_sampling.h"

namespace quiver {
namespace {

template <typename index_t>
void sample_negatives_kernel(const at::Tensor& indptr, const at::Tensor& indices,
                             const at::Tensor& src, int64_t per_src, bool exclude_edges,
                             int64_t max_trials, bool out_rows, int64_t dst_begin,
                             int64_t dst_range, uint64_t key, at::Tensor& out) {
  const int64_t num_edges = indices.numel();
  const int64_t* indptr_p = indptr.const_data_ptr<int64_t>();
  const index_t* indices_p = indices.const_data_ptr<index_t>();
  const int64_t* src_p = src.const_data_ptr<int64_t>();
  int64_t* out_p = out.mutable_data_ptr<int64_t>();
  at::parallel_for(0, out.numel(), 1024, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      const int64_t source = src_p[k / per_src];
      at::philox_engine rng(key, static_cast<uint64_t>(k));
      int64_t drawn = 0;
      for (int64_t trial = 0; trial < max_trials; ++trial) {
        drawn = dst_begin + static_cast<int64_t>(cpu::uniform_below(rng, dst_range));
        if (!exclude_edges) break;
        // (source, drawn) is an edge when one is in the other's row.
        const int64_t scanned = out_rows ? source : drawn;
        const auto wanted = static_cast<index_t>(out_rows ? drawn : source);
        const auto row = cpu::checked_row(indptr_p, scanned, num_edges);
        const index_t* begin = indices_p + row.begin;
        if (std::find(begin, begin + row.degree, wanted) == begin + row.degree) break;
      }
      out_p[k] = drawn;
    }
  });
}

at::Tensor sample_negatives_cpu(const at::Tensor& indptr, const at::Tensor& indices,
                                const at::Tensor& src, int64_t per_src, bool exclude_edges,
                                int64_t max_trials, bool out_rows,
                                const std::optional<at::Generator>& generator,
                                int64_t dst_begin, int64_t dst_count) {
  const int64_t dst_range =
      check_sample_negatives_args(indptr, indices, src, per_src, max_trials, dst_begin, dst_count);
  const at::Tensor src64 = src.to(at::kLong).contiguous();
  check_ids_in_range(src64.const_data_ptr<int64_t>(), src64.numel(), indptr.numel() - 1, "src");
  const int64_t* offsets = indptr.const_data_ptr<int64_t>();
  errors::check_csr_ends(offsets[0], offsets[indptr.numel() - 1], indices.numel());
  cpu::check_fits_host_memory(src64.numel() * per_src, 8,
                              "the negatives (src x per_src = " + std::to_string(src64.numel()) +
                                  " x " + std::to_string(per_src) + ")",
                              "draw fewer per source");
  at::Tensor out = at::empty({src64.numel() * per_src}, src64.options());
  if (out.numel() == 0) return out;
  const uint64_t key = cpu::draw_philox_key(generator);
  AT_DISPATCH_INDEX_TYPES(indices.scalar_type(), "sample_negatives_cpu", [&] {
    sample_negatives_kernel<index_t>(indptr, indices, src64, per_src, exclude_edges, max_trials,
                                     out_rows, dst_begin, dst_range, key, out);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) { m.impl("sample_negatives", &sample_negatives_cpu); }

}  // namespace quiver
