// How a staged gather (gather_tiered_rows with stage_host_rows) splits a table's host rows
// between the GPU's zero-copy reads and CPU threads with the copy engine. Plain C++, so
// that its rule is tested on machines without a GPU (tests/cpp/test_host_read_split.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace quiver::cuda {

// The GPU's share of the host rows, per (GPU, host table), balanced after every call so
// that both parts end together. Their speeds differ by table size (the GPU reads a 1 GiB
// table 4x faster than a 32 GiB one) and by what else runs (a model on the SMs), so the
// share is measured, not fixed.
class HostReadSplit {
 public:
  static constexpr double kFirstShare = 0.3;
  // The GPU keeps a few rows, and the CPU too, so that both speeds stay measured.
  static constexpr double kMinShare = 0.02;
  static constexpr double kMaxShare = 0.98;

  static HostReadSplit& instance() {
    static HostReadSplit* split = new HostReadSplit();  // never destroyed: used until exit
    return *split;
  }

  double share(int device, const void* table) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = shares_.find({device, table});
    return found == shares_.end() ? kFirstShare : found->second;
  }

  // gpu_rows host rows took gpu_ms on the GPU while cpu_rows took cpu_ms through staging:
  // the share moves halfway to the one at which both would have taken as long.
  void update(int device, const void* table, int64_t gpu_rows, float gpu_ms, int64_t cpu_rows,
              float cpu_ms) {
    if (gpu_rows <= 0 || cpu_rows <= 0 || !(gpu_ms > 0) || !(cpu_ms > 0)) return;
    const double gpu_rate = static_cast<double>(gpu_rows) / gpu_ms;
    const double cpu_rate = static_cast<double>(cpu_rows) / cpu_ms;
    const double balanced = gpu_rate / (gpu_rate + cpu_rate);
    std::lock_guard<std::mutex> lock(mutex_);
    double& share = shares_.try_emplace({device, table}, kFirstShare).first->second;
    share = std::clamp(0.5 * share + 0.5 * balanced, kMinShare, kMaxShare);
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<int, const void*>, double> shares_;
};

}  // namespace quiver::cuda
