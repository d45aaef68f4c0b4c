// Waiting for a c10d collective at most a timeout: one way, and one sentence, for every
// runtime class that exchanges over a process group (the collective transport, DistSampler,
// the NCCL communicator of the transport's own). The caller turns the exception into its
// error, naming the silent peers (PeerWatch).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace quiver::runtime {

// What a wait that outlived its timeout raises.
[[noreturn]] inline void no_answer_within(std::chrono::milliseconds timeout) {
  throw std::runtime_error("no answer within " + std::to_string(timeout.count()) + " ms");
}

// Waits for `work` at most `timeout`. Gloo (poll false) blocks on a condition variable
// bounded by the timeout. NCCL (poll true) is polled (a CUDA event query) against the
// deadline instead of wait(timeout), which sleeps a millisecond at a time: four of those per
// fetch cost more than the rows. Its wait() then raises the collective's own error and orders
// the current stream after it.
inline void await_within(const c10::intrusive_ptr<c10d::Work>& work,
                         std::chrono::milliseconds timeout, bool poll) {
  if (!poll) {
    if (!work->wait(timeout)) no_answer_within(timeout);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!work->isCompleted()) {
    if (std::chrono::steady_clock::now() > deadline) no_answer_within(timeout);
    std::this_thread::yield();
  }
  work->wait();
}

}  // namespace quiver::runtime
