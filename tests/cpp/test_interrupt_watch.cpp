// Ctrl-C during the library's waits (runtime/interrupt_watch.h): a SIGINT ends a wait that
// has lasted the grace period, after running the handler that was there before, and no
// sooner; where SIGINT is ignored, waits run to their timeout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>

#include "runtime/bounded_wait.h"
#include "runtime/interrupt_watch.h"

namespace {

using quiver::runtime::InterruptWatch;
using Clock = std::chrono::steady_clock;

std::atomic<int> handled{0};
void count_handled(int) { handled.fetch_add(1); }

// Installs `handler` for SIGINT for the test's length, then puts back what was there.
class SigintHandler {
 public:
  explicit SigintHandler(void (*handler)(int)) {
    struct sigaction action {};
    action.sa_handler = handler;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &before_);
  }
  ~SigintHandler() { sigaction(SIGINT, &before_, nullptr); }

 private:
  struct sigaction before_ {};
};

// Waits for a condition that never holds, up to timeout_s, raising SIGINT after `after`.
// Whether the wait held, and how long it took.
std::pair<bool, double> wait_raising_sigint_after(std::chrono::milliseconds after,
                                                  double timeout_s, InterruptWatch& watch) {
  std::mutex mutex;
  std::condition_variable never;
  std::thread raiser([after] {
    std::this_thread::sleep_for(after);
    std::raise(SIGINT);
  });
  const auto began = Clock::now();
  std::unique_lock<std::mutex> lock(mutex);
  const bool held =
      quiver::runtime::wait_up_to(never, lock, timeout_s, [] { return false; }, &watch);
  const double took = std::chrono::duration<double>(Clock::now() - began).count();
  lock.unlock();
  raiser.join();
  return {held, took};
}

TEST(InterruptWatch, SigintEndsAWaitAfterTheHandlerBeforeIt) {
  const SigintHandler installed(&count_handled);
  handled = 0;
  InterruptWatch watch;
  EXPECT_FALSE(watch.interrupted());
  const auto [held, took] = wait_raising_sigint_after(std::chrono::milliseconds(700), 30.0, watch);
  EXPECT_FALSE(held);
  EXPECT_TRUE(watch.interrupted());
  EXPECT_EQ(handled.load(), 1) << "the handler installed before must still run, once";
  EXPECT_GT(took, 0.6);
  EXPECT_LT(took, 5.0) << "the wait should end soon after the SIGINT, not at its timeout";
  try {
    watch.check("the test's condition");
    ADD_FAILURE() << "check() should raise once interrupted";
  } catch (const quiver::runtime::Interrupted& error) {
    EXPECT_STREQ(error.what(),
                 "interrupted by SIGINT (Ctrl-C) while waiting for the test's condition");
  }
  // A watch made after the SIGINT has not seen one.
  EXPECT_FALSE(InterruptWatch().interrupted());
}

TEST(InterruptWatch, AWaitGivesInOnlyAfterTheGracePeriod) {
  const SigintHandler installed(&count_handled);
  InterruptWatch watch;
  const auto [held, took] = wait_raising_sigint_after(std::chrono::milliseconds(10), 30.0, watch);
  EXPECT_FALSE(held);
  EXPECT_GE(took, std::chrono::duration<double>(quiver::runtime::kInterruptGrace).count() - 0.01);
  EXPECT_LT(took, 5.0) << "then it ends, not at its timeout";
  EXPECT_TRUE(watch.interrupted());
}

TEST(InterruptWatch, AWaitRunsToItsTimeoutWhereSigintIsIgnored) {
  const SigintHandler ignored(SIG_IGN);
  InterruptWatch watch;
  const auto [held, took] = wait_raising_sigint_after(std::chrono::milliseconds(100), 1.5, watch);
  EXPECT_FALSE(held);
  EXPECT_FALSE(watch.interrupted());
  EXPECT_GT(took, 1.4) << "an ignored SIGINT must not end the wait";
}

TEST(InterruptWatch, AWaitThatEndsIsNotInterrupted) {
  // A SIGINT during a wait whose condition comes true within the grace period: the wait
  // returns as it would have, and the handler before ours has run.
  const SigintHandler installed(&count_handled);
  handled = 0;
  InterruptWatch watch;
  std::mutex mutex;
  std::condition_variable wakes;
  bool done = false;
  std::thread raiser([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::raise(SIGINT);
  });
  std::thread finisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    const std::lock_guard<std::mutex> lock(mutex);
    done = true;
    wakes.notify_all();
  });
  std::unique_lock<std::mutex> lock(mutex);
  EXPECT_TRUE(quiver::runtime::wait_up_to(wakes, lock, 30.0, [&] { return done; }, &watch));
  lock.unlock();
  finisher.join();
  raiser.join();
  EXPECT_EQ(handled.load(), 1);
}

}  // namespace
