// torch.classes.quiver.FeatureTiers: where the rows of one feature table live, as one GPU
// sees them. Tier k holds the rows at hotness positions [begin_k, begin_k + rows_k): first
// the GPU-memory tiers (this GPU's cache, or the shards of its NVLink clique), then the
// host tier (pinned, read with zero copy). positions[id] is row id's hotness position.
// gather(ids) runs quiver::gather_tiered_rows with the layout's options and its own
// host-read split (a staged gather's share of host rows for the GPU, learned call by call),
// so Python's Feature, TorchScript models, C++ programs and DistFeature all read the store
// through this one door. It holds the pins of its pinned host tensors, so
// the layout stays readable for as long as it lives, whoever pinned them. It pickles as its
// tensors and which of them were pinned, so a scripted module holding one can be saved and
// loaded, the host tier pinned again in place. release() lets go of every tensor (so a
// peer's mapped GPU shard can be unmapped): later reads raise instead of touching it.
#pragma once

#include <ATen/core/Tensor.h>
#include <quiver/host_pin.h>
#include <torch/custom_class.h>

#include <atomic>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <tuple>
#include <vector>

namespace quiver::internal {
class GathersInFlight;
class HostReadSplit;
}

namespace quiver::runtime {

class FeatureTiers : public torch::CustomClassHolder {
 public:
  // Checks the layout as gather_tiered_rows does (dtypes, row shapes, positions).
  FeatureTiers(std::vector<at::Tensor> tiers, std::optional<at::Tensor> positions);

  // Rows ids (1-D int32/int64) of the table, on the ids' device. host_read_blocks > 0 caps
  // the grid of a GPU gather that reads host tiers (a loader's gathers beside the model:
  // see gather_tiered_rows in ops/internal/gather.h); host rows are read as the options
  // below say. None of them changes a result.
  at::Tensor gather(const at::Tensor& ids, int64_t host_read_blocks = 0) const;
  // How a GPU reads a large batch's rows from the host tier: staged by CPU threads and the
  // copy engine (true) or with zero copy (false, the default). Feature sets it from its
  // host_reads; every gather through this layout follows it.
  void set_stage_host_rows(bool stage) { stage_host_rows_ = stage; }
  bool stages_host_rows() const { return stage_host_rows_; }
  // Whether a GPU reads a large batch's host rows in position order (true, the default:
  // page after page) or in id order (to measure what the order buys). The same result.
  void set_group_host_reads(bool group) { group_host_reads_ = group; }
  bool groups_host_reads() const { return group_host_reads_; }
  // The GPU's share of a staged gather's host rows (the rest go through CPU threads and the
  // copy engine): learned after every staged gather so that both parts end together, or
  // fixed by set_host_read_share(share in [0, 1]) until set_host_read_share(None).
  double host_read_share() const;
  // The share a learned split starts from, before its first staged gather.
  static double first_host_read_share();
  void set_host_read_share(std::optional<double> share);
  bool host_read_share_fixed() const;
  // A prefetching loader's pace at one batch (HostReadSplit::note_pace): while it runs
  // ahead of the model, staged gathers leave more host rows to the CPU threads, whose
  // copies take no SMs from the model; when the model waits for a batch, they take them back.
  void note_loader_pace(bool loader_ahead) const;
  // Whether the loader's pace moves the share (true, the default); false ignores it.
  void set_follow_loader_pace(bool follow) const;
  bool follows_loader_pace() const;
  // The same into `out` (a contiguous CPU tensor of [ids.numel(), *row_shape] and the
  // tiers' dtype), for CPU ids and tiers all in host memory: for callers that keep a
  // buffer across gathers (a fresh large tensor pays a page fault per page written).
  void gather_into(const at::Tensor& ids, const at::Tensor& out) const;

  std::vector<at::Tensor> tiers() const;
  std::optional<at::Tensor> positions() const;
  // Ids the table answers, and its shape (num_rows, *row_shape).
  int64_t num_rows() const { return num_rows_; }
  std::vector<int64_t> shape() const;
  // Rows held by the tiers before the host tier (the last, when it is in host memory): the
  // GPU-memory part; every row when all tiers are in GPU memory.
  int64_t leading_rows() const { return leading_rows_; }
  // Where gathers from this layout run best: the GPU that holds a tier, else the CPU.
  at::Device device() const { return device_; }
  // Rows' dtype and an empty tensor of the rows' shape ([0, *row_shape]).
  at::Tensor empty_rows() const;

  // Drops the tiers, positions and pins (Feature.close() calls it on the layouts it handed
  // out, before the shards they map are freed). Afterwards gather, tiers, positions and
  // state raise; shape and the other facts stay. Waits for gathers under way, and for the
  // kernels of those that returned before their rows were written.
  void release();
  bool released() const { return released_; }

  // The pickle pair. The state is (tiers, positions, flags) where flags[k] is 1 when
  // tiers[k] (k < tiers.size()) or positions (k == tiers.size()) was pinned host memory,
  // then whether host rows are staged and grouped (absent from older states: the defaults).
  // Restoring pins those tensors in place again (when a GPU is present), runs the
  // validating constructor and sets the two read options. Not cloned: a deepcopy (torch
  // passes the state to __setstate__ as it is) shares the rows, as a view of the store;
  // cloning here would double a table's host memory while it is saved.
  using State =
      std::tuple<std::vector<at::Tensor>, std::optional<at::Tensor>, std::vector<int64_t>>;
  State state() const;
  static c10::intrusive_ptr<FeatureTiers> from_state(State state);

 private:
  std::vector<at::Tensor> tiers_;
  std::optional<at::Tensor> positions_;
  int64_t num_rows_;
  std::vector<c10::intrusive_ptr<HostPin>> pins_;  // of the pinned host tensors
  std::vector<std::shared_ptr<void>> held_memory_;  // of the other host tensors
  at::Tensor row_like_;  // [0, *row_shape] of the rows' dtype on the CPU: kept past release
  at::Device device_ = at::Device(at::kCPU);
  int64_t leading_rows_ = 0;
  std::atomic<bool> released_{false};
  // Gathers hold it shared while they read the tiers or launch kernels that read them;
  // release() takes it alone.
  mutable std::shared_mutex memory_mutex_;
  std::atomic<bool> stage_host_rows_{false};
  std::atomic<bool> group_host_reads_{true};
  // The GPU's share of a staged gather's host rows, learned by this layout's gathers.
  std::shared_ptr<internal::HostReadSplit> host_read_split_;
  // Gathers that returned with their rows still being written (every tier on one GPU):
  // release() waits for them before the memory goes.
  std::shared_ptr<internal::GathersInFlight> gathers_in_flight_;

  void check_not_released(const char* what) const;
};

}  // namespace quiver::runtime
