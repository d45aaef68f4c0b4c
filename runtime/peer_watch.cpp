#include "runtime/peer_watch.h"

#include <sstream>

namespace quiver::runtime {

PeerWatch::PeerWatch(c10::intrusive_ptr<c10d::Store> store, std::string prefix, int rank, int size,
                     std::chrono::milliseconds period)
    : store_(std::move(store)),
      prefix_(std::move(prefix)),
      rank_(rank),
      size_(size),
      period_(period),
      last_count_(size, -1),
      last_move_(size, Clock::now()),
      last_answer_(Clock::now()),
      last_attempt_(Clock::now()) {
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
  std::vector<int64_t> counts(size_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stop_; })) {
    last_attempt_ = Clock::now();
    asking_ = true;
    lock.unlock();  // a slow store must not hold up the destructor or a reader
    bool answered = !store_lost_;
    if (answered) {
      try {
        const int64_t step = step_.load(std::memory_order_relaxed);
        if (step != published_step_) {
          const std::string text = std::to_string(step);
          store_->set(step_key(rank_), std::vector<uint8_t>(text.begin(), text.end()));
          published_step_ = step;
        }
        store_->add(key(rank_), 1);
        for (int r = 0; r < size_; ++r) counts[r] = store_->add(key(r), 0);
      } catch (const std::exception&) {
        // The store's host died: nothing to read, and errors say so. Not asked again:
        // each failed call logs its stack (c10d), every period, until this watch ends.
        answered = false;
        store_lost_ = true;
      }
    }
    lock.lock();
    asking_ = false;
    if (!answered) continue;
    const auto now = Clock::now();
    last_answer_ = now;
    for (int r = 0; r < size_; ++r) {
      if (counts[r] != last_count_[r]) {
        last_count_[r] = counts[r];
        last_move_[r] = now;
      }
    }
  }
}

PeerWatch::Silence PeerWatch::silent_peers(std::chrono::milliseconds patience) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Silence silence;
  const auto now = Clock::now();
  if (now - last_answer_ > patience) {
    // Unanswered because unasked: this process was stopped (SIGSTOP, a debugger) or
    // starved, not the store lost.
    // Or asking now: just woken from such a stop, the answer may be a moment away.
    silence.watch_stalled = now - last_attempt_ > patience || asking_;
    silence.store_reachable = false;
    return silence;
  }
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && now - last_move_[r] > patience) silence.peers.push_back(r);
  }
  return silence;
}

std::string PeerWatch::describe(std::chrono::milliseconds patience) const {
  // Its last beat may be read up to a period late, and seen a period after that.
  const auto give_up = Clock::now() + patience + 2 * period_;
  Silence silence = silent_peers(patience);
  // A watch that stalled with its process reads afresh within a period of running again.
  const auto fresh_by = Clock::now() + 2 * period_;
  while (silence.watch_stalled && Clock::now() < fresh_by) {
    std::this_thread::sleep_for(period_ / 4);
    silence = silent_peers(patience);
  }
  while (silence.store_reachable && silence.peers.empty() && Clock::now() < give_up) {
    std::this_thread::sleep_for(period_);
    silence = silent_peers(patience);
  }
  std::ostringstream out;
  if (!silence.store_reachable) {
    // The store's process cannot be told from here: rank 0 under init_method="tcp://",
    // torchrun's agent on the first node, or a store of the caller's own.
    out << "the rendezvous store has not answered for " << patience.count()
        << " ms: the process that holds it (rank 0 with init_method=\"tcp://...\", torchrun's "
           "agent on the first node) may have died, so the failed peer cannot be named";
  } else if (silence.peers.empty()) {
    const std::string behind = peers_behind();
    if (behind.empty()) {
      out << "every peer's heartbeat is still moving (a peer may be slow, not dead)";
    } else {
      out << "every peer's heartbeat is still moving, but " << behind
          << ": alive, but slow or held up elsewhere";
    }
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

std::string PeerWatch::peers_behind() const {
  const int64_t mine = step_.load(std::memory_order_relaxed);
  std::ostringstream out;
  int count = 0;
  try {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      int64_t theirs = 0;  // a peer that never published has made no exchange yet
      if (store_->check({step_key(r)})) {
        const std::vector<uint8_t> text = store_->get(step_key(r));
        theirs = std::stoll(std::string(text.begin(), text.end()));
      }
      if (theirs < mine) {
        out << (count++ ? ", " : "") << "host " << r << " is at exchange " << theirs;
      }
    }
  } catch (const std::exception&) {
    return "";  // the store stopped answering: say nothing rather than guess
  }
  if (count == 0) return "";
  out << ", this host at " << mine;
  return out.str();
}

}  // namespace quiver::runtime
