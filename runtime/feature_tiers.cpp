#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <quiver/feature_tiers.h>
#include <quiver/ops.h>

#include <cstring>

#include "ops/checks.h"
#include "ops/errors.h"
#include "ops/internal/gather.h"
#include "ops/internal/host_read_split.h"
#include "runtime/held_memory.h"

namespace quiver::runtime {

FeatureTiers::FeatureTiers(std::vector<at::Tensor> tiers, std::optional<at::Tensor> positions)
    : tiers_(std::move(tiers)),
      positions_(std::move(positions)),
      host_read_split_(std::make_shared<internal::HostReadSplit>()),
      gathers_in_flight_(std::make_shared<internal::GathersInFlight>()) {
  TORCH_CHECK_VALUE(!positions_ || !positions_->is_meta(),  // (else torch's item() error)
                    "positions is on the meta device, which holds no data");
  check_row_tiers(tiers_, positions_);
  check_positions_in_tiers(tiers_, positions_);
  num_rows_ = tiered_id_count(tiers_, positions_);
  // Host memory stays allocated while the layout lives, whatever happens to its tensors:
  // pickling a Feature for workers runs share_memory_(), which moves a storage to shared
  // memory and frees its pages under a gather that is reading them (runtime/held_memory.h).
  // Pinned tiers are held by their pins, the others here.
  auto hold = [&](const at::Tensor& t) {
    if (!t.device().is_cpu()) return;
    if (t.is_pinned()) {
      pins_.push_back(c10::make_intrusive<HostPin>(t));
    } else if (std::shared_ptr<void> held = hold_storage_memory(t.storage())) {
      held_memory_.push_back(std::move(held));
    }
  };
  for (const at::Tensor& t : tiers_) hold(t);
  if (positions_) hold(*positions_);
  row_like_ = at::empty(rows_like(tiers_.front(), 0),
                        tiers_.front().options().device(at::kCPU).pinned_memory(false));
  // A layout whose GPU memory holds every row has no host tier: all its rows lead.
  const size_t leading = tiers_.back().is_cuda() ? tiers_.size() : tiers_.size() - 1;
  for (size_t k = 0; k < leading; ++k) leading_rows_ += tiers_[k].size(0);
  // The GPU that reads this layout. A clique's layout lists every member's shard, each on
  // its owner's GPU (the first is another GPU's for every member but one); its positions
  // always sit on the reader's.
  if (positions_ && positions_->is_cuda()) {
    device_ = positions_->device();
  } else {
    for (const at::Tensor& t : tiers_) {
      if (t.is_cuda()) {
        device_ = t.device();
        break;
      }
    }
  }
}

void FeatureTiers::check_not_released(const char* what) const {
  TORCH_CHECK(!released_, "FeatureTiers.", what, ": this layout was released (by ",
              "Feature.close(), which frees the memory it read); take a new one from an open ",
              "Feature");
}

void FeatureTiers::release() {
  // Waits for gathers under way (a loader's thread may be reading the tiers while the
  // Feature closes, and the memory goes right after this returns).
  const std::unique_lock<std::shared_mutex> no_gathers(memory_mutex_);
  gathers_in_flight_->wait();  // and for kernels of gathers that have returned
  released_ = true;
  tiers_.clear();
  positions_.reset();
  pins_.clear();
  held_memory_.clear();
}

std::vector<at::Tensor> FeatureTiers::tiers() const {
  const std::shared_lock<std::shared_mutex> reading(memory_mutex_);
  check_not_released("tiers");
  return tiers_;
}

std::optional<at::Tensor> FeatureTiers::positions() const {
  const std::shared_lock<std::shared_mutex> reading(memory_mutex_);
  check_not_released("positions");
  return positions_;
}

at::Tensor FeatureTiers::gather(const at::Tensor& ids, int64_t host_read_blocks) const {
  // Until the rows are in, or their kernel is noted in gathers_in_flight_.
  const std::shared_lock<std::shared_mutex> reading(memory_mutex_);
  check_not_released("gather");
  check_tier_storage(tiers_, positions_);
  return internal::gather_tiered_rows(tiers_, positions_, ids, group_host_reads_,
                                      stage_host_rows_, host_read_blocks,
                                      host_read_split_.get(), gathers_in_flight_.get());
}

void FeatureTiers::gather_into(const at::Tensor& ids, const at::Tensor& out) const {
  const std::shared_lock<std::shared_mutex> reading(memory_mutex_);
  check_not_released("gather_into");
  check_tier_storage(tiers_, positions_);
  check_index_vector(ids, "ids");
  TORCH_CHECK_VALUE(ids.is_cpu() && device().is_cpu(),
                    "FeatureTiers.gather_into gathers on the CPU: ids on ", ids.device(),
                    ", tiers gathered best on ", device());
  for (const at::Tensor& t : tiers_) {
    TORCH_CHECK_VALUE(t.is_cpu(),
                      "FeatureTiers.gather_into needs every tier on the CPU, got one on ",
                      t.device());
  }
  if (positions_) {
    TORCH_CHECK_VALUE(positions_->is_cpu(), "FeatureTiers.gather_into needs positions on the CPU");
  }
  const std::vector<int64_t> shape = rows_like(tiers_.front(), ids.numel());
  TORCH_CHECK_VALUE(out.is_cpu() && out.is_contiguous() && out.sizes() == at::IntArrayRef(shape) &&
                        out.scalar_type() == tiers_.front().scalar_type(),
                    "FeatureTiers.gather_into: out must be a contiguous CPU tensor of ",
                    at::IntArrayRef(shape), " and ",
                    errors::dtype_name(tiers_.front().scalar_type()), ", got ", out.sizes(), " ",
                    errors::dtype_name(out.scalar_type()), " on ", out.device());
  at::Tensor into = out;  // a handle: the rows land in the caller's memory
  internal::gather_from_tiers_into(tiers_, positions_, ids, into);
}

double FeatureTiers::host_read_share() const { return host_read_split_->share(); }

double FeatureTiers::first_host_read_share() { return internal::HostReadSplit::kFirstShare; }

void FeatureTiers::set_host_read_share(std::optional<double> share) {
  TORCH_CHECK_VALUE(!share || (*share >= 0.0 && *share <= 1.0),
                    "FeatureTiers.set_host_read_share: share is the GPU's share of a staged "
                    "gather's host rows, in [0, 1] (or None to learn it), got ", *share);
  // -0.0 as 0.0: the state saves the share's bits, and a set sign bit read back as corrupt.
  if (share) *share += 0.0;
  host_read_split_->fix(share);
}

bool FeatureTiers::host_read_share_fixed() const { return host_read_split_->fixed(); }

void FeatureTiers::note_loader_pace(bool loader_ahead) const {
  host_read_split_->note_pace(loader_ahead);
}

void FeatureTiers::set_follow_loader_pace(bool follow) const {
  host_read_split_->follow_pace(follow);
}

bool FeatureTiers::follows_loader_pace() const { return host_read_split_->follows_pace(); }

std::vector<int64_t> FeatureTiers::shape() const {
  return rows_like(row_like_, num_rows_);
}

FeatureTiers::State FeatureTiers::state() const {
  const std::shared_lock<std::shared_mutex> reading(memory_mutex_);
  check_not_released("state (pickling)");
  std::vector<int64_t> pinned;
  for (const at::Tensor& t : tiers_) pinned.push_back(t.device().is_cpu() && t.is_pinned());
  pinned.push_back(positions_ && positions_->device().is_cpu() && positions_->is_pinned());
  // Then how host rows are read, so that a restored layout reads them the same way.
  pinned.push_back(stage_host_rows_.load());
  pinned.push_back(group_host_reads_.load());
  // And (since 2026-12-06) a fixed GPU share of staged reads, as its double's bits (a share
  // in [0, 1] has no sign bit: -1 is "learned"), and whether the split follows the loader's
  // pace: both were lost, a restored layout learning a share that had been fixed.
  const double share = host_read_share();
  int64_t share_bits = -1;
  if (host_read_share_fixed()) std::memcpy(&share_bits, &share, sizeof(share));
  pinned.push_back(share_bits);
  pinned.push_back(follows_loader_pace());
  return {tiers_, positions_, pinned};
}

at::Tensor FeatureTiers::empty_rows() const { return at::empty_like(row_like_); }

c10::intrusive_ptr<FeatureTiers> FeatureTiers::from_state(State state) {
  auto& [tiers, positions, pinned] = state;
  // One pinned flag per tier and one for the positions, then (states saved since
  // 2026-12-02) whether host rows are staged and grouped, then (since 2026-12-06) the fixed
  // share's bits and whether the split follows the loader's pace.
  const bool has_split = pinned.size() == tiers.size() + 5;
  const bool has_reads = pinned.size() == tiers.size() + 3 || has_split;
  TORCH_CHECK_VALUE(pinned.size() == tiers.size() + 1 || has_reads, "a FeatureTiers state names ",
                    pinned.size(), " flags for ", tiers.size(),
                    " tiers and positions (and the host-read options)");
  const size_t reads_at = tiers.size() + 1;
  const size_t share_at = has_split ? reads_at + 2 : pinned.size();
  for (size_t k = 0; k < pinned.size(); ++k) {  // a doctored archive's 5 was read as true
    TORCH_CHECK_VALUE(k == share_at || pinned[k] == 0 || pinned[k] == 1, "a FeatureTiers ",
                      "state's flag ", k, " is ", pinned[k], ", not 0 or 1: the state is corrupt");
  }
  // A share in [0, 1] has no sign bit; -1 is "learned", any other negative word is no share.
  TORCH_CHECK_VALUE(!has_split || pinned[share_at] >= -1, "a FeatureTiers state's share word is ",
                    pinned[share_at], ", neither -1 (learned) nor a share's bits: the state is "
                    "corrupt");
  // Loaded tensors are pageable: pin again in place what was pinned (a GPU reads it with
  // zero copy); the pins live as long as the restored layout.
  std::vector<c10::intrusive_ptr<HostPin>> pins;
  if (at::hasCUDA()) {
    auto repin = [&](const at::Tensor& t, bool was_pinned) {
      if (was_pinned && t.device().is_cpu() && !t.is_pinned()) {
        pins.push_back(c10::make_intrusive<HostPin>(t));
      }
    };
    for (size_t k = 0; k < tiers.size(); ++k) repin(tiers[k], pinned[k] != 0);
    if (positions) repin(*positions, pinned[tiers.size()] != 0);
  }
  auto restored = c10::make_intrusive<FeatureTiers>(std::move(tiers), std::move(positions));
  if (has_reads) {
    restored->set_stage_host_rows(pinned[reads_at] != 0);
    restored->set_group_host_reads(pinned[reads_at + 1] != 0);
  }
  if (has_split) {
    if (pinned[reads_at + 2] >= 0) {
      double share = 0.0;
      std::memcpy(&share, &pinned[reads_at + 2], sizeof(share));
      restored->set_host_read_share(share);  // checked there: a doctored state is refused
    }
    restored->set_follow_loader_pace(pinned[reads_at + 3] != 0);
  }
  return restored;
}

}  // namespace quiver::runtime
