// CUDA entry point of gather_tiered_rows, and the host side of the row gather that
// gather_rows shares (gather_tiered_rows.h).
#include "ops/cuda/gather_tiered_rows.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/PeerToPeerAccess.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <mutex>
#include <string>
#include <vector>

#include "ops/checks.h"
#include "ops/cuda/device_access.h"
#include "ops/cuda/row_gather.h"

namespace quiver {
namespace cuda {
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
  return gpu_readable(tier, name.c_str(), device);
}

// Where the kernel reports a failing id: a word of mapped pinned memory per host thread,
// cleared by a host store and read after the op's one synchronization, so a call costs no
// memset and no copy. One word per thread suffices because the op waits for its stream
// before it returns.
struct ErrorWord {
  uint64_t* host = nullptr;
  uint64_t* device = nullptr;
};

// Words are carved from pinned pages and go back to the pool when their thread ends, so
// threads that come and go reuse words instead of pinning a page each. The pool and its
// pages live until the process ends: freeing pinned memory at exit can race with CUDA's
// own teardown.
class ErrorWordPool {
 public:
  static ErrorWordPool& instance() {
    static ErrorWordPool* pool = new ErrorWordPool();
    return *pool;
  }

  ErrorWord take() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) {
      constexpr size_t kPageBytes = 4096;
      void* page = nullptr;
      C10_CUDA_CHECK(cudaHostAlloc(&page, kPageBytes, cudaHostAllocMapped | cudaHostAllocPortable));
      void* mapped = nullptr;
      C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, page, 0));
      for (size_t k = 0; k < kPageBytes / sizeof(uint64_t); ++k) {
        free_.push_back({static_cast<uint64_t*>(page) + k, static_cast<uint64_t*>(mapped) + k});
      }
    }
    const ErrorWord word = free_.back();
    free_.pop_back();
    return word;
  }

  void give_back(ErrorWord word) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(word);
  }

 private:
  std::mutex mutex_;
  std::vector<ErrorWord> free_;
};

// This thread's word, returned to the pool when the thread ends.
struct ThreadErrorWord {
  ErrorWord word = ErrorWordPool::instance().take();
  ~ThreadErrorWord() { ErrorWordPool::instance().give_back(word); }
};

const ErrorWord& cleared_error_word() {
  thread_local const ThreadErrorWord mine;
  *mine.word.host = 0;
  return mine.word;
}

// Waits for the gather; raises IndexError naming the first reported failure.
void raise_on_error(const ErrorWord& word, cudaStream_t stream, const at::Tensor& ids,
                    const std::optional<at::Tensor>& positions, int64_t num_ids_allowed,
                    int64_t tier_rows) {
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  const uint64_t host_word = *static_cast<volatile const uint64_t*>(word.host);
  if (host_word == kGatherOk) return;
  const auto code = static_cast<GatherError>(host_word >> kGatherErrorShift);
  const int64_t index = static_cast<int64_t>(host_word & ((uint64_t{1} << kGatherErrorShift) - 1));
  const int64_t id = ids.select(0, index).item<int64_t>();  // the error path may sync freely
  if (code == kGatherPositionOutOfRange) {
    errors::position_out_of_range(id, positions->select(0, id).item<int64_t>(), tier_rows);
  }
  errors::id_out_of_range("ids", index, id, num_ids_allowed);
}

// Grouping reads by position pays for itself (a sort of the positions) only on batches of
// this many ids or more; smaller ones gather in id order.
constexpr int64_t kGroupedReadsMinIds = int64_t{1} << 14;

// Bits that hold every position below `end`.
int bits_for(int64_t end) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) < end) ++bits;
  return bits;
}

template <typename id_t, typename pos_t>
void launch_gather(const RowTiers& layout, int64_t row_bytes, const void* positions,
                   int64_t num_ids_allowed, const at::Tensor& ids, at::Tensor& out,
                   uint64_t* error, bool grouped, cudaStream_t stream) {
  const RowGather<id_t, pos_t> gather{layout, row_bytes, static_cast<const pos_t*>(positions),
                                      num_ids_allowed, ids.const_data_ptr<id_t>(), ids.numel(),
                                      out.mutable_data_ptr(), error};
  if (!grouped) {
    C10_CUDA_CHECK(gather_tiered_rows(gather, stream));
    return;
  }
  const int64_t n = ids.numel();
  const int end_bit = bits_for(layout.begin[layout.num_tiers]);
  at::Tensor scratch = at::empty({4, n}, ids.options().dtype(at::kLong));
  int64_t* base = scratch.mutable_data_ptr<int64_t>();
  const size_t workspace_bytes = position_order_workspace_bytes(n, end_bit);
  at::Tensor space = workspace(workspace_bytes, ids.device());
  const PositionOrder order{base,     base + n, base + 2 * n, base + 3 * n,
                            space.mutable_data_ptr(), workspace_bytes, end_bit};
  C10_CUDA_CHECK(order_by_position(gather, order, stream));
  const RowGather<int64_t, int64_t> grouped_gather{
      layout, row_bytes, nullptr, layout.begin[layout.num_tiers], order.sorted_keys, n,
      out.mutable_data_ptr(), error, order.sorted_rows};
  C10_CUDA_CHECK(gather_tiered_rows(grouped_gather, stream));
}

}  // namespace

at::Tensor gather_from_tiers(at::ArrayRef<at::Tensor> tiers,
                             const std::optional<at::Tensor>& positions, const at::Tensor& ids,
                             bool group_host_reads, const char* op) {
  TORCH_CHECK(ids.is_cuda(), op, " on CUDA needs ids on a GPU, got ids on ", ids.device(),
              " (tables on ", tiers[0].device(), ")");
  const at::Device device = ids.device();
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  at::Tensor out = at::empty(gathered_shape(tiers[0], ids), tiers[0].options().device(device));
  if (out.numel() == 0) return out;
  const int64_t row_bytes = static_cast<int64_t>(out.nbytes()) / ids.numel();
  RowTiers layout{};
  layout.num_tiers = static_cast<int>(tiers.size());
  for (size_t k = 0; k < tiers.size(); ++k) {
    layout.rows[k] = tier_pointer(tiers[k], k, device);
    layout.begin[k + 1] = layout.begin[k] + tiers[k].size(0);
  }
  const void* position_ptr = positions ? gpu_readable(*positions, "positions", device) : nullptr;
  const int64_t num_ids_allowed = tiered_id_count(tiers, positions);
  const ErrorWord& error = cleared_error_word();
  const bool wide_positions = positions && positions->scalar_type() == at::kLong;
  bool host_tier = false;
  for (const at::Tensor& t : tiers) host_tier = host_tier || (!t.is_cuda() && t.numel() > 0);
  const bool grouped = group_host_reads && host_tier && ids.numel() >= kGroupedReadsMinIds;
  AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "gather_from_tiers", [&] {
    if (wide_positions) {
      launch_gather<index_t, int64_t>(layout, row_bytes, position_ptr, num_ids_allowed, ids, out,
                                      error.device, grouped, stream);
    } else {
      launch_gather<index_t, int32_t>(layout, row_bytes, position_ptr, num_ids_allowed, ids, out,
                                      error.device, grouped, stream);
    }
  });
  raise_on_error(error, stream, ids, positions, num_ids_allowed, layout.begin[layout.num_tiers]);
  return out;
}

}  // namespace cuda

namespace {

at::Tensor gather_tiered_rows_cuda(at::TensorList tiers, const std::optional<at::Tensor>& positions,
                                   const at::Tensor& ids, bool group_host_reads) {
  check_gather_tiered_rows_args(tiers, positions, ids);
  return cuda::gather_from_tiers(tiers, positions, ids, group_host_reads, "gather_tiered_rows");
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) { m.impl("gather_tiered_rows", &gather_tiered_rows_cuda); }

}  // namespace quiver
