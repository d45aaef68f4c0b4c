// CPU row gathers: gather_rows (one table) and gather_tiered_rows (rows split over tiers,
// looked up through a position table), both through one kernel.
#include "ops/checks.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstring>

namespace quiver {
namespace {

// Bytes copied per parallel task: enough to amortize scheduling, small enough to balance.
constexpr int64_t kBytesPerTask = 1 << 18;

struct HostTier {
  const char* rows;
  int64_t begin;
  int64_t end;
};

template <typename id_t, typename pos_t>
void gather_kernel(const std::vector<HostTier>& tiers, int64_t row_bytes, const pos_t* positions,
                   int64_t num_ids_allowed, const id_t* ids, int64_t num_ids, char* out) {
  const int64_t tier_end = tiers.back().end;
  const int64_t grain = std::max<int64_t>(1, kBytesPerTask / std::max<int64_t>(row_bytes, 1));
  at::parallel_for(0, num_ids, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t id = static_cast<int64_t>(ids[i]);
      TORCH_CHECK_INDEX(id >= 0 && id < num_ids_allowed, "ids[", i, "] = ", id,
                        " is out of range [0, ", num_ids_allowed, ")");
      const int64_t pos = positions ? static_cast<int64_t>(positions[id]) : id;
      TORCH_CHECK_INDEX(pos >= 0 && pos < tier_end, "positions[", id, "] = ", pos,
                        " is out of range [0, ", tier_end, "), the rows the tiers hold");
      size_t k = 0;
      while (pos >= tiers[k].end) ++k;
      std::memcpy(out + i * row_bytes, tiers[k].rows + (pos - tiers[k].begin) * row_bytes,
                  row_bytes);
    }
  });
}

at::Tensor gather_cpu(at::ArrayRef<at::Tensor> tiers, const std::optional<at::Tensor>& positions,
                      const at::Tensor& ids, const char* op) {
  for (const at::Tensor& t : tiers) {
    TORCH_CHECK(t.device().is_cpu(), op, " on CPU needs every table on the CPU, got one on ",
                t.device(), " (ids on ", ids.device(), ")");
  }
  TORCH_CHECK(!positions || positions->device().is_cpu(), op,
              " on CPU needs positions on the CPU, got ", positions->device());
  at::Tensor out = at::empty(gathered_shape(tiers[0], ids), tiers[0].options());
  if (out.numel() == 0) return out;
  const int64_t row_bytes = out.nbytes() / ids.numel();
  std::vector<HostTier> host_tiers;
  int64_t begin = 0;
  for (const at::Tensor& t : tiers) {
    host_tiers.push_back({static_cast<const char*>(t.const_data_ptr()), begin, begin + t.size(0)});
    begin += t.size(0);
  }
  const int64_t num_ids_allowed = tiered_id_count(tiers, positions);
  auto* dst = static_cast<char*>(out.mutable_data_ptr());
  AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "gather_cpu", [&] {
    using id_t = index_t;
    const id_t* ids_p = ids.const_data_ptr<id_t>();
    if (!positions) {
      gather_kernel<id_t, int64_t>(host_tiers, row_bytes, nullptr, num_ids_allowed, ids_p,
                                   ids.numel(), dst);
    } else if (positions->scalar_type() == at::kInt) {
      gather_kernel<id_t, int32_t>(host_tiers, row_bytes, positions->const_data_ptr<int32_t>(),
                                   num_ids_allowed, ids_p, ids.numel(), dst);
    } else {
      gather_kernel<id_t, int64_t>(host_tiers, row_bytes, positions->const_data_ptr<int64_t>(),
                                   num_ids_allowed, ids_p, ids.numel(), dst);
    }
  });
  return out;
}

at::Tensor gather_rows_cpu(const at::Tensor& table, const at::Tensor& ids) {
  check_gather_rows_args(table, ids);
  TORCH_CHECK(ids.device().is_cpu(), "gather_rows on CPU needs ids on the CPU, got ids on ",
              ids.device());
  return gather_cpu({table}, std::nullopt, ids, "gather_rows");
}

at::Tensor gather_tiered_rows_cpu(at::TensorList tiers, const std::optional<at::Tensor>& positions,
                                  const at::Tensor& ids) {
  check_gather_tiered_rows_args(tiers, positions, ids);
  return gather_cpu(tiers, positions, ids, "gather_tiered_rows");
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CPU, m) {
  m.impl("gather_rows", &gather_rows_cpu);
  m.impl("gather_tiered_rows", &gather_tiered_rows_cpu);
}

}  // namespace quiver
