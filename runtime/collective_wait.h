// Waiting for a c10d collective at most a timeout: one way, and one sentence, for every
// runtime class that exchanges over a process group (the collective transport, DistSampler,
// the NCCL communicator of the transport's own). The caller turns the exception into its
// error, naming the silent peers (PeerWatch).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "runtime/bounded_wait.h"
#include "runtime/interrupt_watch.h"

namespace quiver::runtime {

// What a wait that outlived its timeout raises.
[[noreturn]] inline void no_answer_within(std::chrono::milliseconds timeout) {
  throw std::runtime_error("no answer within " + std::to_string(timeout.count()) + " ms");
}

// Waits for `work` at most `timeout`, raising Interrupted on Ctrl-C (interrupt_watch.h).
// Gloo (poll false): a condition variable woken by the work's future, looked at every
// kInterruptSlice; a Gloo work's own wait(timeout) cannot be cut into slices, since a
// send's or receive's ends the work when it times out. NCCL (poll true) is polled (a CUDA
// event query) against the deadline instead of wait(timeout), which sleeps a millisecond
// at a time: four of those per fetch cost more than the rows. Its wait() then raises the
// collective's own error and orders the current stream after it.
inline void await_within(const c10::intrusive_ptr<c10d::Work>& work,
                         std::chrono::milliseconds timeout, bool poll) {
  const InterruptWatch interrupts;
  if (!poll) {
    struct Completion {
      std::mutex mutex;
      std::condition_variable completed;
      bool done = false;
    };
    c10::intrusive_ptr<c10::ivalue::Future> future;
    try {
      future = work->getFuture();
    } catch (const c10::Error&) {  // a work without a future: waited for in one piece
      if (!work->wait(timeout)) no_answer_within(timeout);
      return;
    }
    auto completion = std::make_shared<Completion>();
    future->addCallback([completion](c10::ivalue::Future&) {
      {
        const std::lock_guard<std::mutex> lock(completion->mutex);
        completion->done = true;
      }
      completion->completed.notify_all();
    });
    std::unique_lock<std::mutex> lock(completion->mutex);
    const bool done =
        wait_up_to(completion->completed, lock, std::chrono::duration<double>(timeout).count(),
                   [&] { return completion->done; }, &interrupts);
    lock.unlock();
    if (!done) {
      interrupts.check("the other hosts");
      no_answer_within(timeout);
    }
    work->wait();  // raises the collective's own error
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!work->isCompleted()) {
    if (std::chrono::steady_clock::now() > deadline) no_answer_within(timeout);
    interrupts.check("the other hosts");
    std::this_thread::yield();
  }
  work->wait();
}

}  // namespace quiver::runtime
