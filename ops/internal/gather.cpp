// ops/internal/gather.h's gather_tiered_rows: a layout's gathers on a GPU go to the CUDA
// gather with the layout's options and host-read split; anything else to the op itself.
#include "ops/internal/gather.h"

#include <quiver/ops.h>

#include "ops/checks.h"

#ifdef QUIVER_WITH_CUDA
#include "ops/cuda/gather_tiered_rows.h"
#endif

namespace quiver::internal {

void GathersInFlight::note(const c10::Stream& stream) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [noted, event] : last_on_stream_) {
    if (noted == stream) {
      event.record(stream);
      return;
    }
  }
  last_on_stream_.emplace_back(stream, c10::Event(stream.device_type()));
  last_on_stream_.back().second.record(stream);
}

void GathersInFlight::wait() {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (auto& noted : last_on_stream_) noted.second.synchronize();
}

at::Tensor gather_tiered_rows(at::ArrayRef<at::Tensor> tiers,
                              const std::optional<at::Tensor>& positions, const at::Tensor& ids,
                              bool group_host_reads, bool stage_host_rows,
                              int64_t host_read_blocks, HostReadSplit* split,
                              GathersInFlight* in_flight) {
  check_host_read_blocks(host_read_blocks);
#ifdef QUIVER_WITH_CUDA
  // Where the dispatcher would send the op: CUDA when any argument is on a GPU.
  bool cuda = ids.is_cuda() || (positions && positions->is_cuda());
  for (const at::Tensor& t : tiers) cuda = cuda || t.is_cuda();
  if (cuda) {
    check_gather_tiered_rows_args(tiers, positions, ids);
    return cuda::gather_from_tiers(tiers, positions, ids, group_host_reads, stage_host_rows,
                                   "gather_tiered_rows", host_read_blocks, split, in_flight);
  }
#endif
  // CPU threads read host memory directly: grouping, staging and the block cap are GPU
  // matters (its reach over host pages, its SMs) and change nothing here.
  (void)split;
  (void)in_flight;
  return quiver::gather_tiered_rows(tiers, positions, ids);
}

}  // namespace quiver::internal
