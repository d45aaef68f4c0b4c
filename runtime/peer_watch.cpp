#include "runtime/peer_watch.h"

#include <sstream>

namespace quiver::runtime {

PeerWatch::PeerWatch(c10::intrusive_ptr<c10d::Store> store, std::string prefix, int rank, int size,
                     std::chrono::milliseconds period)
    : store_(std::move(store)),
      prefix_(std::move(prefix)),
      rank_(rank),
      size_(size),
      period_(period) {
  store_->add(key(rank_), 1);  // present before any peer looks
  thread_ = std::thread([this] { beat(); });
}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void PeerWatch::beat() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();  // a slow store must not hold up the destructor
    try {
      store_->add(key(rank_), 1);
    } catch (const std::exception&) {
      // The store is gone (its host died): nothing to beat into; errors name that instead.
    }
    lock.lock();
  }
}

PeerWatch::Silence PeerWatch::silent_peers(std::chrono::milliseconds patience) const {
  Silence silence;
  std::vector<int64_t> before(size_), after(size_);
  try {
    for (int r = 0; r < size_; ++r) before[r] = store_->add(key(r), 0);
    std::this_thread::sleep_for(patience);
    for (int r = 0; r < size_; ++r) after[r] = store_->add(key(r), 0);
  } catch (const std::exception&) {
    silence.store_reachable = false;
    return silence;
  }
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && after[r] == before[r]) silence.peers.push_back(r);
  }
  return silence;
}

std::string PeerWatch::describe(std::chrono::milliseconds patience) const {
  const Silence silence = silent_peers(patience);
  std::ostringstream out;
  if (!silence.store_reachable) {
    out << "the rendezvous store cannot be reached (its host may have died), so the failed "
           "peer cannot be named";
  } else if (silence.peers.empty()) {
    out << "every peer's heartbeat is still moving (a peer may be slow, not dead)";
  } else {
    out << (silence.peers.size() == 1 ? "host " : "hosts ");
    for (size_t k = 0; k < silence.peers.size(); ++k) {
      out << (k ? ", " : "") << silence.peers[k];
    }
    out << (silence.peers.size() == 1 ? " has" : " have") << " stopped answering (no heartbeat for "
        << patience.count() << " ms)";
  }
  return out.str();
}

}  // namespace quiver::runtime
