// The row gather's face for runtime/: what the stateful classes (FeatureTiers, DistFeature)
// need of the gather engine beyond the ops themselves. runtime/ includes this header, the
// other ops/internal/ headers and <quiver/ops.h>, and nothing under ops/cpu/ or ops/cuda/
// (tests/python/test_layout.py holds that rule).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace quiver::internal {

// CPU: rows `ids` of `tiers` into `out`, a contiguous CPU tensor of rows_like(tiers[0],
// ids) and the tiers' dtype. The caller checks the layout and `out` (FeatureTiers does so
// once, at construction and per call), as the ops' kernels trust their wrappers. For
// callers that reuse a buffer: a fresh large tensor pays its page faults on first write.
void gather_from_tiers_into(at::ArrayRef<at::Tensor> tiers,
                            const std::optional<at::Tensor>& positions, const at::Tensor& ids,
                            at::Tensor& out);

// CPU: out[where[i]] = rows[i] for every row i, in parallel (the inverse of a gather). Every
// tensor contiguous, `where` int64 indices into out (checked by the caller), out and rows of
// one row size.
void scatter_rows_into(const at::Tensor& rows, const at::Tensor& where, at::Tensor& out);

class HostReadSplit;  // host_read_split.h

// Gathers that returned before their rows were written. A GPU gather whose tiers (and
// positions) all sit on the ids' GPU waits only for a check of its ids, a kernel ahead of
// it, and returns with the gather queued, as torch's own ops return: a batch's launch then
// overlaps the previous batch's rows. A layout that frees its memory first waits for the
// gathers noted here (FeatureTiers::release).
class GathersInFlight {
 public:
  // After such a gather, queued on `stream`.
  void note(const c10::Stream& stream);
  // Until every noted gather has ended.
  void wait();

 private:
  std::mutex mutex_;
  std::vector<std::pair<c10::Stream, c10::Event>> last_on_stream_;
};

// gather_tiered_rows (its checks, its result) with a layout's options, which change how
// a GPU reads host rows and never the result: group_host_reads (a large batch's host rows
// read in position order, page after page), stage_host_rows (such a batch's trailing host
// rows split between the GPU's zero-copy reads and CPU threads that gather into pinned
// staging for the copy engine, by `split`, which the call's speeds teach; none: a fixed
// first share), host_read_blocks > 0 (a gather that reads host rows runs on at most that
// many blocks of 1024 threads, leaving the SMs to other work while its reads wait on PCIe;
// 0: as many blocks of 256 as its rows fill; < 0 raises ValueError). On the CPU, the op.
// The door every gather of a FeatureTiers goes through (Feature, DistFeature, serving).
// A gather that returns before its rows are written is noted in `in_flight` (if given).
at::Tensor gather_tiered_rows(at::ArrayRef<at::Tensor> tiers,
                              const std::optional<at::Tensor>& positions, const at::Tensor& ids,
                              bool group_host_reads, bool stage_host_rows,
                              int64_t host_read_blocks, HostReadSplit* split,
                              GathersInFlight* in_flight = nullptr);

}  // namespace quiver::internal

namespace quiver::cuda {

// A gather launched without waiting for it (enqueue_gather_from_tiers): a bad id or
// position is recorded, not raised, until raise_if_failed, which the caller calls after it
// has waited for the stream. For callers that must not block the host mid-stream: the
// distributed fetch enqueues its gathers between collectives, where a wait could hang on a
// dead peer. Defined in the CUDA build only.
class PendingGather {
 public:
  PendingGather();
  PendingGather(PendingGather&&) noexcept;
  PendingGather& operator=(PendingGather&&) noexcept;
  ~PendingGather();
  // The rows; written once the stream reaches the gather.
  const at::Tensor& rows() const { return rows_; }
  // Raises IndexError as gather_tiered_rows does, if the gather met a bad id or position.
  // Call it after the stream has passed the gather.
  void raise_if_failed() const;

 private:
  struct State;
  friend PendingGather enqueue_gather_from_tiers(at::ArrayRef<at::Tensor>,
                                                 const std::optional<at::Tensor>&,
                                                 const at::Tensor&, bool, int64_t,
                                                 const char*);
  at::Tensor rows_;
  std::unique_ptr<State> state_;
};

// gather_tiered_rows' gather on the current stream (the layout and ids checked as the op
// checks them), returning before the rows are written (never staged: staging waits for the
// GPU; a caller whose layout stages gathers the synchronous way instead). host_read_blocks
// caps the blocks of a gather that reads host rows, as the op's argument does (0: no cap).
// `op` names the caller in placement errors.
PendingGather enqueue_gather_from_tiers(at::ArrayRef<at::Tensor> tiers,
                                        const std::optional<at::Tensor>& positions,
                                        const at::Tensor& ids, bool group_host_reads,
                                        int64_t host_read_blocks, const char* op);

}  // namespace quiver::cuda
