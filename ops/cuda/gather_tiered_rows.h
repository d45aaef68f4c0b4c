// Host side of the CUDA row gather, shared by the gather_rows and gather_tiered_rows entry
// points: resolves where each tier lives, launches row_gather.cu and turns a reported bad
// id or position into an IndexError after the call's one wait.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace quiver::internal {
class GathersInFlight;
class HostReadSplit;
}

namespace quiver::cuda {

// Rows `ids` (on a GPU) of `tiers` (checked by the caller), on the ids' GPU. With
// group_host_reads, a large batch that reads a pinned host tier is read in position order
// (row_gather.h: PositionOrder). With stage_host_rows, such a batch's rows in trailing host
// tiers are split between the GPU's zero-copy reads and CPU threads that gather them into
// pinned staging for the copy engine, split by `split` (ops/internal/host_read_split.h;
// none: at its first share, learning nothing). `op` names the calling op in placement
// errors. host_read_blocks > 0 caps the grid of a gather that reads host tiers (see
// gather_tiered_rows in library.cpp). When every tier and the positions sit on the ids' GPU,
// the call waits for a check of the ids only and returns with the gather queued on the
// current stream (noted in `in_flight`, if given); any other gather has ended on return.
at::Tensor gather_from_tiers(at::ArrayRef<at::Tensor> tiers,
                             const std::optional<at::Tensor>& positions, const at::Tensor& ids,
                             bool group_host_reads, bool stage_host_rows, const char* op,
                             int64_t host_read_blocks = 0,
                             internal::HostReadSplit* split = nullptr,
                             internal::GathersInFlight* in_flight = nullptr);

}  // namespace quiver::cuda
