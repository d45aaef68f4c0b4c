// CUDA entry points of gather_rows and gather_tiered_rows; both run the one tiered kernel.
#include "ops/checks.h"
#include "ops/cuda/gather_kernels.h"
#include "ops/cuda/sampling_host.h"

#include <ATen/cuda/PeerToPeerAccess.h>
#include <torch/library.h>

namespace quiver {
namespace {

// A pointer `device` can read for a tier: its own memory, a peer GPU's (enabling peer
// access once per pair), or pinned host memory.
const void* tier_pointer(const at::Tensor& tier, size_t k, const at::Device& device) {
  if (tier.is_cuda() && tier.device() != device) {
    TORCH_CHECK(at::cuda::get_p2p_access(device.index(), tier.device().index()), "tiers[", k,
                "] is on ", tier.device(), ", which ", device,
                " cannot read directly (no peer access between them): keep a GPU's tiers on "
                "GPUs of its NVLink clique");
    return tier.const_data_ptr();
  }
  const std::string name = "tiers[" + std::to_string(k) + "]";
  return cuda::gpu_readable(tier, name.c_str(), device);
}

// Where the kernel reports a failing id: this thread's word of mapped pinned memory,
// cleared by a host store and read after the op's one synchronization, so a call costs no
// memset and no copy. One word per thread suffices because the op waits for its stream
// before it returns.
struct ErrorWord {
  uint64_t* host = nullptr;
  uint64_t* device = nullptr;
};

const ErrorWord& cleared_error_word() {
  // Never freed: releasing pinned memory at thread exit can race with CUDA's teardown.
  thread_local const ErrorWord word = [] {
    ErrorWord w;
    void* p = nullptr;
    C10_CUDA_CHECK(cudaHostAlloc(&p, sizeof(uint64_t), cudaHostAllocMapped | cudaHostAllocPortable));
    w.host = static_cast<uint64_t*>(p);
    C10_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&w.device), p, 0));
    return w;
  }();
  *word.host = 0;
  return word;
}

// Waits for the gather; raises IndexError naming the first reported failure.
void raise_on_error(const ErrorWord& word, cudaStream_t stream, const at::Tensor& ids,
                    const std::optional<at::Tensor>& positions, int64_t num_ids_allowed,
                    int64_t tier_rows) {
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  const uint64_t host_word = *static_cast<volatile const uint64_t*>(word.host);
  if (host_word == cuda::kGatherOk) return;
  const auto code = static_cast<cuda::GatherError>(host_word >> cuda::kGatherErrorShift);
  const int64_t index = static_cast<int64_t>(host_word & ((uint64_t{1} << cuda::kGatherErrorShift) - 1));
  const int64_t id = ids.select(0, index).item<int64_t>();  // the error path may sync freely
  if (code == cuda::kGatherPositionOutOfRange) {
    TORCH_CHECK_INDEX(false, "positions[", id, "] = ", positions->select(0, id).item<int64_t>(),
                      " is out of range [0, ", tier_rows, "), the rows the tiers hold");
  }
  TORCH_CHECK_INDEX(false, "ids[", index, "] = ", id, " is out of range [0, ", num_ids_allowed, ")");
}

at::Tensor gather_cuda(at::ArrayRef<at::Tensor> tiers, const std::optional<at::Tensor>& positions,
                       const at::Tensor& ids, const char* op) {
  TORCH_CHECK(ids.is_cuda(), op, " on CUDA needs ids on a GPU, got ids on ", ids.device(),
              " (tables on ", tiers[0].device(), ")");
  const at::Device device = ids.device();
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  at::Tensor out = at::empty(gathered_shape(tiers[0], ids), tiers[0].options().device(device));
  if (out.numel() == 0) return out;
  const int64_t row_bytes = static_cast<int64_t>(out.nbytes()) / ids.numel();
  cuda::RowTiers layout{};
  layout.num_tiers = static_cast<int>(tiers.size());
  for (size_t k = 0; k < tiers.size(); ++k) {
    layout.rows[k] = tier_pointer(tiers[k], k, device);
    layout.begin[k + 1] = layout.begin[k] + tiers[k].size(0);
  }
  const void* position_ptr = positions ? cuda::gpu_readable(*positions, "positions", device) : nullptr;
  const int64_t num_ids_allowed = tiered_id_count(tiers, positions);
  const ErrorWord& error = cleared_error_word();
  AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "gather_cuda", [&] {
    const auto* ids_p = ids.const_data_ptr<index_t>();
    if (positions && positions->scalar_type() == at::kLong) {
      cuda::gather_tiered_rows<index_t, int64_t>(
          layout, row_bytes, static_cast<const int64_t*>(position_ptr), num_ids_allowed, ids_p,
          ids.numel(), out.mutable_data_ptr(), error.device, stream);
    } else {
      cuda::gather_tiered_rows<index_t, int32_t>(
          layout, row_bytes, static_cast<const int32_t*>(position_ptr), num_ids_allowed, ids_p,
          ids.numel(), out.mutable_data_ptr(), error.device, stream);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  raise_on_error(error, stream, ids, positions, num_ids_allowed, layout.begin[layout.num_tiers]);
  return out;
}

// The table may sit on the ids' GPU or in pinned host memory (read over PCIe with zero
// copy); rows land on the ids' GPU either way.
at::Tensor gather_rows_cuda(const at::Tensor& table, const at::Tensor& ids) {
  check_gather_rows_args(table, ids);
  return gather_cuda({table}, std::nullopt, ids, "gather_rows");
}

at::Tensor gather_tiered_rows_cuda(at::TensorList tiers, const std::optional<at::Tensor>& positions,
                                   const at::Tensor& ids) {
  check_gather_tiered_rows_args(tiers, positions, ids);
  return gather_cuda(tiers, positions, ids, "gather_tiered_rows");
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) {
  m.impl("gather_rows", &gather_rows_cuda);
  m.impl("gather_tiered_rows", &gather_tiered_rows_cuda);
}

}  // namespace quiver
