// Waits given in seconds as a double (a Python float: 1.5, math.inf), for condition
// variables and futures. std::chrono turns a wait's seconds into int64 nanoseconds, which
// overflow near 9.2e9 s (and at infinity); libstdc++'s deadline then lies in the past and
// the wait gives up at once. So a wait this long or longer waits without a limit, and NaN
// is refused naming the caller.
#pragma once

#include <c10/util/Exception.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <mutex>

namespace quiver::runtime {

constexpr double kNoLimitS = 1e9;  // about 32 years

// A ValueError, "<caller>: timeout_s must be a number of seconds, got nan", for NaN.
inline void check_wait_seconds(double timeout_s, const char* caller) {
  TORCH_CHECK_VALUE(!std::isnan(timeout_s), caller,
                    ": timeout_s must be a number of seconds, got nan");
}

// Waits on `wakes` until `done`, at most timeout_s (for ever at kNoLimitS or more; at once
// at 0 or less). Whether `done` holds.
template <typename Done>
bool wait_up_to(std::condition_variable& wakes, std::unique_lock<std::mutex>& lock,
                double timeout_s, Done done) {
  if (timeout_s >= kNoLimitS) {
    wakes.wait(lock, done);
    return true;
  }
  return wakes.wait_for(lock, std::chrono::duration<double>(timeout_s), done);
}

// Whether `result` (a std::future or std::shared_future) is ready within timeout_s (for
// ever at kNoLimitS or more).
template <typename Future>
bool ready_within(const Future& result, double timeout_s) {
  if (timeout_s >= kNoLimitS) {
    result.wait();
    return true;
  }
  return result.wait_for(std::chrono::duration<double>(timeout_s)) == std::future_status::ready;
}

}  // namespace quiver::runtime
