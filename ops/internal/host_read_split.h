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
// not fixed. A user may fix it (Feature.host_read_share): a balanced gather ends soonest,
// but beside a model that fills the SMs, every host row the CPU takes is SM time given back
// to the model, so the quickest gather need not make the quickest epoch.
class HostReadSplit {
 public:
  static constexpr double kFirstShare = 0.3;
  // The GPU keeps a few rows, and the CPU too, so that both speeds stay measured.
  static constexpr double kMinShare = 0.02;
  static constexpr double kMaxShare = 0.98;

  double share() {
    std::lock_guard<std::mutex> lock(mutex_);
    return share_;
  }

  // gpu_rows host rows took gpu_ms on the GPU while cpu_rows took cpu_ms through staging:
  // the share moves halfway to the one at which both would have taken as long.
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

  // `share` in [0, 1] (the caller checks it) holds until fixed again; std::nullopt learns
  // again from the share in force, brought within the learned bounds.
  void fix(std::optional<double> share) {
    std::lock_guard<std::mutex> lock(mutex_);
    fixed_ = share.has_value();
    share_ = fixed_ ? *share : std::clamp(share_, kMinShare, kMaxShare);
  }

  bool fixed() {
    std::lock_guard<std::mutex> lock(mutex_);
    return fixed_;
  }

 private:
  std::mutex mutex_;
  double share_ = kFirstShare;
  bool fixed_ = false;
};

}  // namespace quiver::internal
