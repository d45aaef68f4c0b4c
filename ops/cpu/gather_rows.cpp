#include "ops/checks.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstring>

namespace quiver {
namespace {

// Bytes copied per parallel task: enough to amortize scheduling, small enough to balance.
constexpr int64_t kBytesPerTask = 1 << 18;

template <typename id_t>
void gather_rows_kernel(const at::Tensor& table, const at::Tensor& ids, at::Tensor& out) {
  const int64_t num_rows = table.size(0);
  const int64_t row_bytes = num_rows == 0 ? 0 : table.nbytes() / num_rows;
  const auto* src = static_cast<const char*>(table.const_data_ptr());
  auto* dst = static_cast<char*>(out.mutable_data_ptr());
  const id_t* ids_p = ids.const_data_ptr<id_t>();
  const int64_t grain = std::max<int64_t>(1, kBytesPerTask / std::max<int64_t>(row_bytes, 1));
  at::parallel_for(0, ids.numel(), grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t id = static_cast<int64_t>(ids_p[i]);
      TORCH_CHECK_INDEX(id >= 0 && id < num_rows, "ids[", i, "] = ", id, " is out of range [0, ",
                  num_rows, ")");
      std::memcpy(dst + i * row_bytes, src + id * row_bytes, row_bytes);
    }
  });
}

at::Tensor gather_rows_cpu(const at::Tensor& table, const at::Tensor& ids) {
  check_gather_rows_args(table, ids);
  TORCH_CHECK(table.device().is_cpu() && ids.device().is_cpu(),
              "gather_rows on CPU needs table and ids on the CPU, got table on ", table.device(),
              " and ids on ", ids.device());
  std::vector<int64_t> shape = table.sizes().vec();
  shape[0] = ids.numel();
  at::Tensor out = at::empty(shape, table.options());
  AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "gather_rows_cpu",
                          [&] { gather_rows_kernel<index_t>(table, ids, out); });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) {
  m.impl("gather_rows", &gather_rows_cpu);
}

}  // namespace quiver
