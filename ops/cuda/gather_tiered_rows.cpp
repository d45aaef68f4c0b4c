// CUDA entry point of gather_tiered_rows, and the host side of the row gather that
// gather_rows shares (gather_tiered_rows.h).
#include "ops/cuda/gather_tiered_rows.h"
#include "ops/internal/gather.h"

#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/PeerToPeerAccess.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <memory>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <mutex>
#include <string>
#include <vector>

#include "ops/checks.h"
#include "ops/cpu/row_gather.h"
#include "ops/cuda/device_access.h"
#include "ops/internal/host_read_split.h"
#include "ops/cuda/row_gather.h"

namespace quiver {
namespace cuda {
namespace {

// A pointer `device` can read for a tier: its own memory, a peer GPU's (enabling peer
// access once per pair), or pinned host memory. Errors name the tier as the calling op's
// arguments do: gather_rows has one `table`, the others `tiers[k]`.
const void* tier_pointer(const at::Tensor& tier, size_t k, const at::Device& device,
                         const char* op) {
  const std::string name = std::string(op) == "gather_rows"
                               ? std::string("table")
                               : "tiers[" + std::to_string(k) + "]";
  if (tier.is_cuda() && tier.device() != device) {
    TORCH_CHECK(at::cuda::get_p2p_access(device.index(), tier.device().index()), name, " is on ",
                tier.device(), ", which ", device,
                " cannot read directly (no peer access between them): keep a GPU's tiers on "
                "GPUs of its NVLink clique");
    return tier.const_data_ptr();
  }
  return gpu_readable(tier, name.c_str(), device);
}

// Where the kernel reports a failing id: a word of mapped pinned memory per host thread,
// cleared by a host store and read after the op's one wait, so a call costs no memset and
// no copy. One word per thread suffices because the op waits for whatever writes the word
// (the gather, or the check of its ids ahead of a gather launched without the word) before
// it returns.
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

// Raises IndexError naming the failure reported in `word`, if any. Call it once whatever
// writes the word has ended.
void raise_reported(const ErrorWord& word, const at::Tensor& ids,
                    const std::optional<at::Tensor>& positions, int64_t num_ids_allowed,
                    int64_t tier_rows) {
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

// Positions sorted on the GPU (row_gather.h: PositionOrder), in scratch this object keeps
// alive, with `extra_slots` more int64 words after the four arrays for the caller.
struct SortedPositions {
  at::Tensor scratch;
  at::Tensor space;
  PositionOrder order{};
  int64_t* extra = nullptr;
};

template <typename id_t, typename pos_t>
SortedPositions sort_positions(const RowGather<id_t, pos_t>& gather, const at::Tensor& ids,
                               int64_t extra_slots, cudaStream_t stream) {
  SortedPositions sorted;
  const int64_t n = ids.numel();
  const int end_bit = bits_below(gather.tiers.begin[gather.tiers.num_tiers]);
  sorted.scratch = at::empty({4 * n + extra_slots}, ids.options().dtype(at::kLong));
  int64_t* base = sorted.scratch.mutable_data_ptr<int64_t>();
  sorted.extra = base + 4 * n;
  const size_t workspace_bytes = position_order_workspace_bytes(n, end_bit);
  sorted.space = workspace(workspace_bytes, ids.device());
  sorted.order = PositionOrder{base,
                               base + n,
                               base + 2 * n,
                               base + 3 * n,
                               sorted.space.mutable_data_ptr(),
                               workspace_bytes,
                               end_bit};
  C10_CUDA_CHECK(order_by_position(gather, sorted.order, stream));
  return sorted;
}

// The gather of `ids` into `out` as the kernels take it.
template <typename id_t, typename pos_t>
RowGather<id_t, pos_t> row_gather_of(const RowTiers& layout, int64_t row_bytes,
                                     const void* positions, int64_t num_ids_allowed,
                                     const at::Tensor& ids, at::Tensor& out, uint64_t* error) {
  return {layout,
          row_bytes,
          static_cast<const pos_t*>(positions),
          num_ids_allowed,
          ids.const_data_ptr<id_t>(),
          ids.numel(),
          out.mutable_data_ptr(),
          error};
}

// With `checked` (ungrouped gathers only): the ids are checked first, into `error`, and
// `checked` recorded after that check; the gather then runs without the word.
template <typename id_t, typename pos_t>
void launch_gather(const RowTiers& layout, int64_t row_bytes, const void* positions,
                   int64_t num_ids_allowed, const at::Tensor& ids, at::Tensor& out, uint64_t* error,
                   bool grouped, int64_t max_blocks, const at::cuda::CUDAStream& stream,
                   at::cuda::CUDAEvent* checked) {
  auto gather =
      row_gather_of<id_t, pos_t>(layout, row_bytes, positions, num_ids_allowed, ids, out, error);
  gather.max_blocks = max_blocks;
  if (!grouped) {
    if (checked != nullptr) {
      C10_CUDA_CHECK(check_gather_ids(gather, stream));
      checked->record(stream);
      gather.error = nullptr;
    }
    C10_CUDA_CHECK(gather_tiered_rows(gather, stream));
    return;
  }
  const int64_t n = ids.numel();
  const SortedPositions sorted = sort_positions(gather, ids, 0, stream);
  const PositionOrder& order = sorted.order;
  RowGather<int64_t, int64_t> grouped_gather{layout,
                                             row_bytes,
                                             nullptr,
                                             layout.begin[layout.num_tiers],
                                             order.sorted_keys,
                                             n,
                                             out.mutable_data_ptr(),
                                             error,
                                             order.sorted_rows};
  grouped_gather.max_blocks = max_blocks;
  C10_CUDA_CHECK(gather_tiered_rows(grouped_gather, stream));
}

// The first position of the trailing host tiers (pinned CPU tensors), or the layout's end
// when the last tier is on a GPU: staging moves rows of those tiers only.
int64_t trailing_host_begin(at::ArrayRef<at::Tensor> tiers, const RowTiers& layout) {
  int k = layout.num_tiers;
  while (k > 0 && !tiers[k - 1].is_cuda()) --k;
  return layout.begin[k];
}

// One row into staging. Streaming stores skip reading the staging lines into the cache
// first: they are written whole and next read by the copy engine (faster on the H100
// host, docs/benchmarks.md).
inline void copy_row(char* to, const char* from, int64_t bytes, bool streaming) {
#if defined(__SSE2__)
  if (streaming) {
    for (int64_t b = 0; b < bytes; b += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(to + b),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + b)));
    }
    return;
  }
#endif
  std::memcpy(to, from, bytes);
}

// CPU threads copy the host rows at sorted `positions` into pinned `staging`, slice after
// slice, and each slice goes to `staging_on_gpu` on `copies` (the copy engine) as soon as
// it is whole, so copies run beside the threads' reads. No SM is involved.
void stage_host_rows(at::ArrayRef<at::Tensor> tiers, const RowTiers& layout,
                     const int64_t* positions, int64_t num_rows, int64_t row_bytes, char* staging,
                     char* staging_on_gpu, const at::Device& device, cudaStream_t copies) {
  // Large enough that a copy's fixed cost is small, small enough that the last slices'
  // copies, left after the reads end, are short.
  constexpr int64_t kSliceBytes = int64_t{512} << 10;
  // Rows whose reads are started ahead of their copy (cpu::detail::kRowsAhead): random
  // host rows miss every cache. (4, 8 and 16 measured the same on the H100 host.)
  using cpu::detail::kRowsAhead;
  const int64_t rows_per_slice = std::max<int64_t>(1, kSliceBytes / row_bytes);
  const int64_t slices = (num_rows + rows_per_slice - 1) / rows_per_slice;
  const int num_tiers = layout.num_tiers;
  auto host_row = [&](int64_t pos) {
    int k = num_tiers - 1;
    while (pos < layout.begin[k]) --k;
    return static_cast<const char*>(tiers[k].const_data_ptr()) +
           (pos - layout.begin[k]) * row_bytes;
  };
#if defined(__SSE2__)
  const bool streaming = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(staging) % 16 == 0;
#else
  const bool streaming = false;
#endif
  at::parallel_for(0, slices, 1, [&](int64_t first_slice, int64_t last_slice) {
    const c10::cuda::CUDAGuard guard(device);  // copies are issued from pool threads
    for (int64_t slice = first_slice; slice < last_slice; ++slice) {
      const int64_t begin = slice * rows_per_slice;
      const int64_t end = std::min(num_rows, begin + rows_per_slice);
      for (int64_t i = begin; i < end; ++i) {
        if (i + kRowsAhead < end) {
          cpu::detail::prefetch_row<false>(host_row(positions[i + kRowsAhead]), row_bytes);
        }
        copy_row(staging + i * row_bytes, host_row(positions[i]), row_bytes, streaming);
      }
#if defined(__SSE2__)
      if (streaming) _mm_sfence();  // the slice's stores land before its copy reads them
#endif
      C10_CUDA_CHECK(cudaMemcpyAsync(staging_on_gpu + begin * row_bytes,
                                     staging + begin * row_bytes, (end - begin) * row_bytes,
                                     cudaMemcpyHostToDevice, copies));
    }
  });
}

// Pinned buffers a thread reuses from call to call (the op waits for its copies before it
// returns): a batch's staged bytes differ each time, and a fresh pinned block would cost a
// cudaHostAlloc, which stalls the whole device. `grown` is set when one had to be taken.
void* pinned_scratch(int which, int64_t bytes, bool& grown) {
  thread_local at::Tensor buffers[2];
  at::Tensor& buffer = buffers[which];
  if (!buffer.defined() || buffer.numel() < bytes) {
    buffer = at::Tensor();  // back to PyTorch's pinned cache before the larger one is taken
    buffer =
        at::empty({bytes + bytes / 2}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    grown = true;
  }
  return buffer.mutable_data_ptr();
}

// The staged gather. Positions are sorted on the GPU (as for grouped reads) and split
// there: the kernel starts at once on the GPU tiers' rows and the GPU's share of the host
// rows (zero copy), while the sorted positions travel to the host on a side stream; CPU
// threads and the copy engine then stage the other host rows on that stream
// (stage_host_rows), and a scatter puts them into their output rows.
template <typename id_t, typename pos_t>
void launch_staged_gather(at::ArrayRef<at::Tensor> tiers, const RowTiers& layout, int64_t row_bytes,
                          const void* positions, int64_t num_ids_allowed, const at::Tensor& ids,
                          at::Tensor& out, uint64_t* error, int64_t max_blocks,
                          internal::HostReadSplit* split) {
  const at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
  const int device = out.device().index();
  const at::cuda::CUDAStream copies = at::cuda::getStreamFromPool(false, device);
  const auto gather =
      row_gather_of<id_t, pos_t>(layout, row_bytes, positions, num_ids_allowed, ids, out, error);
  const int64_t n = ids.numel();
  const int64_t tier_end = layout.begin[layout.num_tiers];
  const SortedPositions sorted = sort_positions(gather, ids, 2, stream);
  const PositionOrder& order = sorted.order;
  int64_t* bounds = sorted.extra;  // [first host row, first staged row] in sorted order
  // Bad ids were reported and sorted as position 0, among the GPU tiers' rows. The split
  // is the layout's, learned call by call; the op alone keeps none and splits at the first.
  const double share = split != nullptr ? split->share() : internal::HostReadSplit::kFirstShare;
  C10_CUDA_CHECK(split_sorted_positions(order.sorted_keys, n, trailing_host_begin(tiers, layout),
                                        share, bounds, stream));
  at::cuda::CUDAEvent started(cudaEventDefault), gpu_done(cudaEventDefault),
      copies_done(cudaEventDefault), on_host;
  started.record(stream);
  RowGather<int64_t, int64_t> on_gpu{
      layout, row_bytes,        nullptr, tier_end, order.sorted_keys, n, out.mutable_data_ptr(),
      error,  order.sorted_rows};
  on_gpu.ids_end = bounds + 1;
  on_gpu.max_blocks = max_blocks;  // its share of the host rows is read with zero copy
  C10_CUDA_CHECK(gather_tiered_rows(on_gpu, stream));
  gpu_done.record(stream);

  started.block(copies);
  bool cold_start = false;  // buffers taken this call: its CPU time is no measure of speed
  auto* host_positions =
      static_cast<int64_t*>(pinned_scratch(0, (n + 2) * sizeof(int64_t), cold_start));
  C10_CUDA_CHECK(cudaMemcpyAsync(host_positions, order.sorted_keys, n * sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, copies));
  C10_CUDA_CHECK(cudaMemcpyAsync(host_positions + n, bounds, 2 * sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, copies));
  on_host.record(copies);
  on_host.synchronize();
  const int64_t host_from = host_positions[n];
  const int64_t staged_from = host_positions[n + 1];
  const int64_t staged = n - staged_from;
  // Lives past the wait below: the scatter on `stream` reads it, and a block freed
  // earlier would go back to the copies' stream's pool while that kernel may still be queued.
  at::Tensor staging_on_gpu;
  if (staged > 0) {
    {
      // Allocated on the copies' stream, which writes it first: a block freed by work still
      // queued on `stream` is then never handed out under it.
      const c10::cuda::CUDAStreamGuard on_copies(copies);
      staging_on_gpu = at::empty({staged * row_bytes}, out.options().dtype(at::kByte));
    }
    auto* gpu_rows = static_cast<char*>(staging_on_gpu.mutable_data_ptr());
    auto* staging = static_cast<char*>(pinned_scratch(1, staged * row_bytes, cold_start));
    stage_host_rows(tiers, layout, host_positions + staged_from, staged, row_bytes, staging,
                    gpu_rows, out.device(), copies.stream());
    copies_done.record(copies);
    copies_done.block(stream);
    RowTiers staged_layout{};
    staged_layout.rows[0] = gpu_rows;
    staged_layout.begin[1] = staged;
    staged_layout.num_tiers = 1;
    const RowGather<int64_t, int64_t> scatter{staged_layout,
                                              row_bytes,
                                              nullptr,
                                              staged,
                                              nullptr,
                                              staged,
                                              out.mutable_data_ptr(),
                                              error,
                                              order.sorted_rows + staged_from};
    C10_CUDA_CHECK(gather_tiered_rows(scatter, stream));
  }
  // Waits here, not only in the caller: the split needs both parts' times, and the staging
  // buffers and the scratch are reused or freed once this returns.
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (split != nullptr && staged > 0 && !cold_start) {
    split->update(staged_from - host_from, started.elapsed_time(gpu_done), staged,
                  started.elapsed_time(copies_done));
  }
}

}  // namespace

namespace {

// Whether every tier and the positions sit in `device`'s own memory. Only then may a call
// return before its gather ends: pinned host rows and a peer's mapped shard can be freed
// or unmapped in ways no stream orders.
bool all_on(const at::Device& device, at::ArrayRef<at::Tensor> tiers,
            const std::optional<at::Tensor>& positions) {
  for (const at::Tensor& t : tiers) {
    if (t.device() != device) return false;
  }
  return !positions || positions->device() == device;
}

// The gather launched on the current stream, its failures reported in `error`: returns the
// rows (their writes may still be in flight) and the tiers' end position. With
// `check_ahead` (given only when all_on the ids' GPU), the ids are checked by a kernel of
// their own, recorded in *check_ahead: the word is final once that event is; otherwise it
// is once the stream has passed the gather.
at::Tensor launch_from_tiers(at::ArrayRef<at::Tensor> tiers,
                             const std::optional<at::Tensor>& positions, const at::Tensor& ids,
                             bool group_host_reads, bool stage_host_rows, int64_t host_read_blocks,
                             const char* op, uint64_t* error, int64_t* tier_end,
                             internal::HostReadSplit* split = nullptr,
                             at::cuda::CUDAEvent* check_ahead = nullptr) {
  TORCH_CHECK(ids.is_cuda(), op, " on CUDA needs ids on a GPU, got ids on ", ids.device(),
              " (tables on ", tiers[0].device(), ")");
  const at::Device device = ids.device();
  const c10::cuda::CUDAGuard guard(device);
  const at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
  at::Tensor out = at::empty(rows_like(tiers[0], ids.numel()), tiers[0].options().device(device));
  *tier_end = 0;
  for (const at::Tensor& t : tiers) *tier_end += t.size(0);
  if (out.numel() == 0) return out;
  const int64_t row_bytes = static_cast<int64_t>(out.nbytes()) / ids.numel();
  RowTiers layout{};
  layout.num_tiers = static_cast<int>(tiers.size());
  for (size_t k = 0; k < tiers.size(); ++k) {
    layout.rows[k] = tier_pointer(tiers[k], k, device, op);
    layout.begin[k + 1] = layout.begin[k] + tiers[k].size(0);
    if (tiers[k].is_cuda() && tiers[k].device() != device && tiers[k].numel() > 0) {
      // A peer GPU's tier is read after the work queued on its own current stream (a copy
      // that fills a clique's shard, say), as a copy between the two devices would wait.
      at::cuda::CUDAEvent written;
      written.record(at::cuda::getCurrentCUDAStream(tiers[k].device().index()));
      written.block(at::cuda::getCurrentCUDAStream(device.index()));
    }
  }
  const void* position_ptr = positions ? gpu_readable(*positions, "positions", device) : nullptr;
  const int64_t num_ids_allowed = tiered_id_count(tiers, positions);
  const bool wide_positions = positions && positions->scalar_type() == at::kLong;
  bool host_tier = false;
  for (const at::Tensor& t : tiers) host_tier = host_tier || (!t.is_cuda() && t.numel() > 0);
  const bool large = host_tier && ids.numel() >= kGroupedReadsMinIds;
  const bool grouped = group_host_reads && large;
  const bool staged = stage_host_rows && large &&
                      trailing_host_begin(tiers, layout) < layout.begin[layout.num_tiers];
  const int64_t max_blocks = host_tier ? host_read_blocks : 0;
  AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "gather_from_tiers", [&] {
    if (staged && wide_positions) {
      launch_staged_gather<index_t, int64_t>(tiers, layout, row_bytes, position_ptr,
                                             num_ids_allowed, ids, out, error, max_blocks, split);
    } else if (staged) {
      launch_staged_gather<index_t, int32_t>(tiers, layout, row_bytes, position_ptr,
                                             num_ids_allowed, ids, out, error, max_blocks, split);
    } else if (wide_positions) {
      launch_gather<index_t, int64_t>(layout, row_bytes, position_ptr, num_ids_allowed, ids, out,
                                      error, grouped, max_blocks, stream, check_ahead);
    } else {
      launch_gather<index_t, int32_t>(layout, row_bytes, position_ptr, num_ids_allowed, ids, out,
                                      error, grouped, max_blocks, stream, check_ahead);
    }
  });
  return out;
}

// This thread's event for the check of a gather's ids on `device` (made at its first record).
at::cuda::CUDAEvent& ids_checked_event(const at::Device& device) {
  thread_local std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events;
  if (events.size() <= static_cast<size_t>(device.index())) events.resize(device.index() + 1);
  auto& event = events[device.index()];
  if (!event) event = std::make_unique<at::cuda::CUDAEvent>(cudaEventDisableTiming);
  return *event;
}

}  // namespace

at::Tensor gather_from_tiers(at::ArrayRef<at::Tensor> tiers,
                             const std::optional<at::Tensor>& positions, const at::Tensor& ids,
                             bool group_host_reads, bool stage_host_rows, const char* op,
                             int64_t host_read_blocks, internal::HostReadSplit* split,
                             internal::GathersInFlight* in_flight) {
  // On the ids' GPU before the error word is taken: a thread's first word pins a page, and
  // on a new thread's current GPU (0) that would make a context there for another GPU's
  // gather.
  const c10::cuda::OptionalCUDAGuard on_ids_gpu(
      ids.is_cuda() ? std::optional<at::Device>(ids.device()) : std::nullopt);
  const ErrorWord& error = cleared_error_word();
  int64_t tier_end = 0;
  at::cuda::CUDAEvent* check_ahead = ids.is_cuda() && all_on(ids.device(), tiers, positions)
                                         ? &ids_checked_event(ids.device())
                                         : nullptr;
  at::Tensor out = launch_from_tiers(tiers, positions, ids, group_host_reads, stage_host_rows,
                                     host_read_blocks, op, error.device, &tier_end, split,
                                     check_ahead);
  if (out.numel() == 0) {
    if (row_bytes_of(tiers[0]) == 0) check_ids_of_empty_rows(tiers, positions, ids);
    return out;
  }
  const c10::cuda::CUDAGuard guard(ids.device());
  const at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
  if (check_ahead != nullptr) {
    check_ahead->synchronize();
    if (in_flight != nullptr) in_flight->note(stream);
  } else {
    C10_CUDA_CHECK(cudaStreamSynchronize(stream.stream()));
  }
  raise_reported(error, ids, positions, tiered_id_count(tiers, positions), tier_end);
  return out;
}

// What an enqueued gather keeps until its check: its own error word (not the thread's,
// which the caller's next gather clears) and what names a failure.
struct PendingGather::State {
  ErrorWord word = ErrorWordPool::instance().take();
  at::Tensor ids;
  std::optional<at::Tensor> positions;
  int64_t num_ids_allowed = 0;
  int64_t tier_end = 0;
  // A word whose gather was never checked may still be written (the stream did not reach
  // it, say behind a collective that failed): it is not handed out again.
  bool checked = false;
  ~State() {
    if (checked) ErrorWordPool::instance().give_back(word);
  }
};

PendingGather::PendingGather() = default;
PendingGather::PendingGather(PendingGather&&) noexcept = default;
PendingGather& PendingGather::operator=(PendingGather&&) noexcept = default;
PendingGather::~PendingGather() = default;

void PendingGather::raise_if_failed() const {
  if (!state_) return;
  state_->checked = true;
  if (!rows_.defined() || rows_.numel() == 0) return;
  const uint64_t word = *static_cast<volatile const uint64_t*>(state_->word.host);
  if (word == kGatherOk) return;
  // Read only after the caller's wait, so the failing id is final; naming it may sync.
  const c10::cuda::CUDAGuard guard(state_->ids.device());
  raise_reported(state_->word, state_->ids, state_->positions, state_->num_ids_allowed,
                 state_->tier_end);
}

PendingGather enqueue_gather_from_tiers(at::ArrayRef<at::Tensor> tiers,
                                        const std::optional<at::Tensor>& positions,
                                        const at::Tensor& ids, bool group_host_reads,
                                        int64_t host_read_blocks, const char* op) {
  check_gather_tiered_rows_args(tiers, positions, ids);
  check_host_read_blocks(host_read_blocks);
  PendingGather pending;
  pending.state_ = std::make_unique<PendingGather::State>();
  PendingGather::State& state = *pending.state_;
  *state.word.host = kGatherOk;
  state.ids = ids;
  state.positions = positions;
  state.num_ids_allowed = tiered_id_count(tiers, positions);
  pending.rows_ =
      launch_from_tiers(tiers, positions, ids, group_host_reads, /*stage_host_rows=*/false,
                        host_read_blocks, op, state.word.device, &state.tier_end);
  if (pending.rows_.numel() == 0 && row_bytes_of(tiers[0]) == 0) {
    check_ids_of_empty_rows(tiers, positions, ids);
  }
  return pending;
}

}  // namespace cuda

namespace {

at::Tensor gather_tiered_rows_cuda(at::TensorList tiers, const std::optional<at::Tensor>& positions,
                                   const at::Tensor& ids) {
  check_gather_tiered_rows_args(tiers, positions, ids);
  return cuda::gather_from_tiers(tiers, positions, ids, /*group_host_reads=*/true,
                                 /*stage_host_rows=*/false, "gather_tiered_rows");
}

}  // namespace

TORCH_LIBRARY_IMPL(quiver, CUDA, m) { m.impl("gather_tiered_rows", &gather_tiered_rows_cuda); }

}  // namespace quiver
