// Which peers are alive, from heartbeats in the rendezvous store (the c10d store that
// torchrun and init_process_group set up). Each host's watch bumps its own counter every
// period and reads its peers'; a transport that meets a failure asks which peers went
// silent, and its error names them instead of saying "a collective timed out". The answer
// is immediate: the watch has been reading the counters all along.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace quiver::runtime {

class PeerWatch {
 public:
  // Beats `rank`'s counter under `prefix`, and reads the others', every `period` until
  // destroyed.
  PeerWatch(c10::intrusive_ptr<c10d::Store> store, std::string prefix, int rank, int size,
            std::chrono::milliseconds period);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Peers whose counter has not moved for `patience`. If the store stopped answering for
  // that long, store_reachable is false and no peer can be named.
  struct Silence {
    std::vector<int> peers;
    bool store_reachable = true;
    bool watch_stalled = false;  // this watch's own thread has not run for `patience`
  };
  Silence silent_peers(std::chrono::milliseconds patience) const;

  // A sentence for an error message: "host 2 has stopped answering" and the like. A
  // failure often shows the moment a peer dies, while its last beat is still fresh: this
  // waits (at most `patience` and two periods) for some peer to fall silent before it
  // answers.
  std::string describe(std::chrono::milliseconds patience) const;

  std::chrono::milliseconds period() const { return period_; }

  // This host has begun its `step`-th exchange with its peers (every host makes the same
  // exchanges in the same order). Published with the next beat, so that a failure met while
  // every heartbeat moves can name the peers still at an earlier exchange.
  void reached(int64_t step) { step_.store(step, std::memory_order_relaxed); }

 private:
  using Clock = std::chrono::steady_clock;
  std::string key(int rank) const { return prefix_ + std::to_string(rank); }
  std::string step_key(int rank) const { return prefix_ + "step/" + std::to_string(rank); }
  void beat();
  // "host 1 is at exchange 41, this host at 42", for the peers whose published step is
  // behind this host's; empty when none is, or the store does not say.
  std::string peers_behind() const;

  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  int rank_;
  int size_;
  std::chrono::milliseconds period_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool store_lost_ = false;  // written and read by the beating thread only
  std::vector<int64_t> last_count_;           // per peer, as last read
  std::vector<Clock::time_point> last_move_;  // per peer, when its count last changed
  Clock::time_point last_answer_;             // when the store last answered
  Clock::time_point last_attempt_;            // when this thread last asked the store
  bool asking_ = false;                       // whether it is asking now
  std::atomic<int64_t> step_{0};
  int64_t published_step_ = 0;  // the beating thread's own
  std::thread thread_;
};

}  // namespace quiver::runtime
