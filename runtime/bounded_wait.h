// Waits given in seconds as a double (a Python float: 1.5, math.inf), for condition
// variables and futures. std::chrono turns a wait's seconds into int64 nanoseconds, which
// overflow near 9.2e9 s (and at infinity); libstdc++'s deadline then lies in the past and
// the wait gives up at once. So a wait this long or longer waits without a limit, and NaN
// is refused naming the caller.
#pragma once

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <mutex>

#include "runtime/interrupt_watch.h"

namespace quiver::runtime {

constexpr double kNoLimitS = 1e9;  // about 32 years

// A ValueError, "<caller>: timeout_s must be a number of seconds, got nan", for NaN.
inline void check_wait_seconds(double timeout_s, const char* caller) {
  TORCH_CHECK_VALUE(!std::isnan(timeout_s), caller,
                    ": timeout_s must be a number of seconds, got nan");
}

// Cuts a wait of timeout_s (for ever at kNoLimitS or more) into slices of at most
// kInterruptSlice, asking `ready(slice)` until it holds, the time is up, or `interrupts`
// says a Ctrl-C came. Whether `ready` held.
template <typename Ready>
bool wait_in_slices(double timeout_s, const InterruptWatch& interrupts, Ready ready) {
  using Clock = std::chrono::steady_clock;
  const bool limited = timeout_s < kNoLimitS;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(limited ? timeout_s : 0));
  for (;;) {
    Clock::duration slice = kInterruptSlice;
    if (limited) slice = std::min(slice, deadline - Clock::now());
    if (ready(std::max(slice, Clock::duration::zero()))) return true;
    if (interrupts.interrupted() || (limited && Clock::now() >= deadline)) return false;
  }
}

// Waits on `wakes` until `done`, at most timeout_s (for ever at kNoLimitS or more; at once
// at 0 or less). Given `interrupts`, a Ctrl-C ends the wait too (interrupt_watch.h): the
// caller tells it from a timeout by interrupts->interrupted(). Whether `done` holds.
template <typename Done>
bool wait_up_to(std::condition_variable& wakes, std::unique_lock<std::mutex>& lock,
                double timeout_s, Done done, const InterruptWatch* interrupts = nullptr) {
  if (interrupts != nullptr && interrupts->armed() && timeout_s > 0) {
    return wait_in_slices(timeout_s, *interrupts,
                          [&](auto slice) { return wakes.wait_for(lock, slice, done); });
  }
  if (timeout_s >= kNoLimitS) {
    wakes.wait(lock, done);
    return true;
  }
  return wakes.wait_for(lock, std::chrono::duration<double>(timeout_s), done);
}

// Whether `result` (a std::future or std::shared_future) is ready within timeout_s (for
// ever at kNoLimitS or more), or, given `interrupts`, before a Ctrl-C.
template <typename Future>
bool ready_within(const Future& result, double timeout_s,
                  const InterruptWatch* interrupts = nullptr) {
  if (interrupts != nullptr && interrupts->armed() && timeout_s > 0) {
    return wait_in_slices(timeout_s, *interrupts, [&](auto slice) {
      return result.wait_for(slice) == std::future_status::ready;
    });
  }
  if (timeout_s >= kNoLimitS) {
    result.wait();
    return true;
  }
  return result.wait_for(std::chrono::duration<double>(timeout_s)) == std::future_status::ready;
}

}  // namespace quiver::runtime
