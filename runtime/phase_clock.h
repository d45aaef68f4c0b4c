// QUIVER_TRACE_TRANSPORT=1 prints the phases of each distributed gather, fetch and sampling
// hop (ms) to stderr: a tuning aid that costs nothing when off.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace quiver::runtime {

inline bool tracing_transport() {
  static const bool on = [] {
    const char* value = std::getenv("QUIVER_TRACE_TRANSPORT");
    return value != nullptr && value[0] == '1';
  }();
  return on;
}

class PhaseClock {
 public:
  explicit PhaseClock(const char* what) : what_(what) {}
  void lap(const char* phase) {
    if (!on_) return;
    const auto now = Clock::now();
    line_ << " " << phase << " " << std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
  }
  ~PhaseClock() {
    if (on_) std::fprintf(stderr, "quiver %s (ms):%s\n", what_, line_.str().c_str());
  }

 private:
  using Clock = std::chrono::steady_clock;
  const char* what_;
  bool on_ = tracing_transport();
  Clock::time_point last_ = Clock::now();
  std::ostringstream line_;
};

}  // namespace quiver::runtime
