#include "runtime/interrupt_watch.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <csignal>

namespace quiver::runtime {
namespace {

std::atomic<uint64_t> interrupts{0};
std::atomic<bool> in_handler{false};
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<bool>::is_always_lock_free,
              "used inside a signal handler");

// The handler ours runs first. Written only by the main thread, while ours is not
// installed.
struct sigaction chained {};

bool is_handler(const struct sigaction& action) {
  if (action.sa_flags & SA_SIGINFO) return action.sa_sigaction != nullptr;
  return action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN;
}

void count_interrupt(int signal, siginfo_t* info, void* context) {
  // A handler that chained to ours and was then chained to by ours would call it again.
  if (in_handler.exchange(true)) return;
  if (chained.sa_flags & SA_SIGINFO) {
    chained.sa_sigaction(signal, info, context);
  } else {
    chained.sa_handler(signal);
  }
  // After the chained handler: once a wait sees the count, Python has seen the signal.
  interrupts.fetch_add(1, std::memory_order_release);
  in_handler.store(false);
}

// Installs count_interrupt in front of the process's SIGINT handler, where there is one
// and it is not ours already. Python's signal.signal() later puts its own back, with no
// harm: the next wait chains again. Called on the main thread only, which is also the
// only thread on which Python changes handlers.
void hook_sigint() {
  struct sigaction now {};
  if (sigaction(SIGINT, nullptr, &now) != 0) return;
  if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == &count_interrupt) return;
  if (!is_handler(now)) return;
  chained = now;
  struct sigaction ours = now;  // the same mask and flags
  ours.sa_flags |= SA_SIGINFO;
  ours.sa_sigaction = &count_interrupt;
  sigaction(SIGINT, &ours, nullptr);
}

// The process's first thread: Python's main thread, the only one its handlers run on.
bool on_main_thread() { return syscall(SYS_gettid) == getpid(); }

}  // namespace

Interrupted::Interrupted(const std::string& waiting_for)
    : std::runtime_error(std::string(kInterruptedText) + " while waiting for " + waiting_for) {}

InterruptWatch::InterruptWatch()
    : armed_(on_main_thread()), made_(std::chrono::steady_clock::now()) {
  if (!armed_) return;
  hook_sigint();
  seen_ = interrupts.load(std::memory_order_acquire);
}

bool InterruptWatch::interrupted() const {
  return armed_ && interrupts.load(std::memory_order_acquire) != seen_ &&
         std::chrono::steady_clock::now() - made_ >= kInterruptGrace;
}

}  // namespace quiver::runtime
