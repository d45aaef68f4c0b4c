// ops/internal/gather.h's gather_tiered_rows: a layout's gathers on a GPU go to the CUDA
// gather with its host-read split; anything else to the op itself.
#include "ops/internal/gather.h"

#include <quiver/ops.h>

#include "ops/checks.h"

#ifdef QUIVER_WITH_CUDA
#include "ops/cuda/gather_tiered_rows.h"
#endif

namespace quiver::internal {

at::Tensor gather_tiered_rows(at::ArrayRef<at::Tensor> tiers,
                              const std::optional<at::Tensor>& positions, const at::Tensor& ids,
                              bool stage_host_rows, int64_t host_read_blocks,
                              HostReadSplit* split) {
#ifdef QUIVER_WITH_CUDA
  // Where the dispatcher would send the op: CUDA when any argument is on a GPU.
  bool cuda = ids.is_cuda() || (positions && positions->is_cuda());
  for (const at::Tensor& t : tiers) cuda = cuda || t.is_cuda();
  if (cuda) {
    check_gather_tiered_rows_args(tiers, positions, ids, host_read_blocks);
    return cuda::gather_from_tiers(tiers, positions, ids, /*group_host_reads=*/true,
                                   stage_host_rows, "gather_tiered_rows", host_read_blocks, split);
  }
#endif
  (void)split;  // a CPU gather stages nothing
  return quiver::gather_tiered_rows(tiers, positions, ids, /*group_host_reads=*/true,
                                    stage_host_rows, host_read_blocks);
}

}  // namespace quiver::internal
