// Which peers are alive, from heartbeats in the rendezvous store (the c10d store that
// torchrun and init_process_group set up). A transport that meets a failure asks which
// peers went silent, so its error names them instead of "a collective timed out".
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
  // Beats `rank`'s counter under `prefix` every `period` until destroyed.
  PeerWatch(c10::intrusive_ptr<c10d::Store> store, std::string prefix, int rank, int size,
            std::chrono::milliseconds period);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Peers whose counter did not move in `patience` (several periods). If the store itself
  // cannot be reached, store_reachable is false and no peer can be named.
  struct Silence {
    std::vector<int> peers;
    bool store_reachable = true;
  };
  Silence silent_peers(std::chrono::milliseconds patience) const;

  // A sentence for an error message: "host 2 stopped answering" and the like.
  std::string describe(std::chrono::milliseconds patience) const;

  std::chrono::milliseconds period() const { return period_; }

 private:
  std::string key(int rank) const { return prefix_ + std::to_string(rank); }
  void beat();

  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  int rank_;
  int size_;
  std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace quiver::runtime
