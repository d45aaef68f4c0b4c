// How a staged gather (gather_tiered_rows with stage_host_rows) splits a table's host rows
// between the GPU's zero-copy reads and CPU threads with the copy engine. A feature layout
// (runtime FeatureTiers: one GPU's tiers) owns one and its gathers learn it; the op itself
// keeps none and splits at kFirstShare. Plain C++, so that its rule is tested on machines
// without a GPU (tests/cpp/test_host_read_split.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>

namespace quiver::internal {

// The GPU's share of one layout's host rows, balanced after every call so that both parts
// end together. Their speeds differ by table size (the GPU reads a 1 GiB table 4x faster
// than a 32 GiB one) and by what else runs (a model on the SMs), so the share is measured,
// not fixed. A balanced gather ends soonest, but beside a model that fills the SMs, every
// host row the CPU takes is SM time given back to the model, so the quickest gather need
// not make the quickest epoch: a prefetching loader tells the split its pace (note_pace),
// and while it runs ahead of the model the GPU takes only part of the balanced share. A
// user may also fix the share (Feature.host_read_share).
class HostReadSplit {
 public:
  static constexpr double kFirstShare = 0.3;
  // The GPU keeps a few rows, and the CPU too, so that both speeds stay measured.
  static constexpr double kMinShare = 0.02;
  static constexpr double kMaxShare = 0.98;
  // A loader ahead of the model gives up a tenth of the GPU's part at each batch; one the
  // model waited for takes back half as much again, so that it soon stops costing the
  // model time. The part never falls below kMinYield, from which it is back whole after
  // eight waits.
  static constexpr double kYieldAhead = 0.9;
  static constexpr double kReclaimBehind = 1.5;
  static constexpr double kMinYield = 0.05;

  // The share a gather takes: the balanced one, times the part the loader's pace leaves
  // the GPU, within the learned bounds; or the fixed one.
  double share() {
    std::lock_guard<std::mutex> lock(mutex_);
    return fixed_ ? share_ : std::clamp(share_ * yield_, kMinShare, kMaxShare);
  }

  // The part of the balanced share the GPU takes, in [kMinYield, 1].
  double yield() {
    std::lock_guard<std::mutex> lock(mutex_);
    return yield_;
  }

  // gpu_rows host rows took gpu_ms on the GPU while cpu_rows took cpu_ms through staging:
  // the balanced share moves halfway to the one at which both would have taken as long.
  // A fixed share is kept.
  void update(int64_t gpu_rows, float gpu_ms, int64_t cpu_rows, float cpu_ms) {
    if (gpu_rows <= 0 || cpu_rows <= 0 || !(gpu_ms > 0) || !(cpu_ms > 0)) return;
    const double gpu_rate = static_cast<double>(gpu_rows) / gpu_ms;
    const double cpu_rate = static_cast<double>(cpu_rows) / cpu_ms;
    const double balanced = gpu_rate / (gpu_rate + cpu_rate);
    std::lock_guard<std::mutex> lock(mutex_);
    if (fixed_) return;
    share_ = std::clamp(0.5 * share_ + 0.5 * balanced, kMinShare, kMaxShare);
  }

  // A prefetching loader's pace at one batch: ahead when the batch was ready before the
  // model needed it, behind when the model waited for it (on a GPU, the GPU's order of the
  // two: BatchPrefetcher and Prefetcher read it from events).
  void note_pace(bool loader_ahead) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!follows_pace_) return;
    yield_ = std::clamp(yield_ * (loader_ahead ? kYieldAhead : kReclaimBehind), kMinYield, 1.0);
  }

  // `share` in [0, 1] (the caller checks it) holds until fixed again, whatever the pace;
  // std::nullopt learns again from the share in force, brought within the learned bounds.
  void fix(std::optional<double> share) {
    std::lock_guard<std::mutex> lock(mutex_);
    fixed_ = share.has_value();
    share_ = fixed_ ? *share : std::clamp(share_, kMinShare, kMaxShare);
    yield_ = 1.0;
  }

  bool fixed() {
    std::lock_guard<std::mutex> lock(mutex_);
    return fixed_;
  }

  // Whether the loader's pace moves the share (the default). Off, the GPU takes the whole
  // balanced share whatever the pace: to measure what the pace buys, or where the host's
  // cores are wanted elsewhere.
  void follow_pace(bool follow) {
    std::lock_guard<std::mutex> lock(mutex_);
    follows_pace_ = follow;
    yield_ = 1.0;
  }

  bool follows_pace() {
    std::lock_guard<std::mutex> lock(mutex_);
    return follows_pace_;
  }

 private:
  std::mutex mutex_;
  double share_ = kFirstShare;  // balanced, or fixed
  double yield_ = 1.0;
  bool fixed_ = false;
  bool follows_pace_ = true;
};

}  // namespace quiver::internal
