// Which peers are alive, from heartbeats in the rendezvous store (the c10d store that
// torchrun and init_process_group set up). Each host's watch bumps its own counter every
// period and reads its peers'; a transport that meets a failure asks which peers went
// silent, and its error names them instead of saying "a collective timed out". The answer
// is immediate: the watch has been reading the counters all along.
#pragma once

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
  };
  Silence silent_peers(std::chrono::milliseconds patience) const;

  // A sentence for an error message: "host 2 has stopped answering" and the like. A
  // failure often shows the moment a peer dies, while its last beat is still fresh: this
  // waits (at most `patience` and two periods) for some peer to fall silent before it
  // answers.
  std::string describe(std::chrono::milliseconds patience) const;

  std::chrono::milliseconds period() const { return period_; }

 private:
  using Clock = std::chrono::steady_clock;
  std::string key(int rank) const { return prefix_ + std::to_string(rank); }
  void beat();

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
  std::thread thread_;
};

}  // namespace quiver::runtime
