#include "runtime/host_agreement.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <sstream>
#include <thread>

#include "runtime/interrupt_watch.h"

namespace quiver::runtime {

namespace {

// The pauses between reads of the store: from 1 ms, doubling up to one interrupt slice,
// each followed by a look for Ctrl-C (Interrupted naming what was waited for).
class StorePolls {
 public:
  template <typename WaitingFor>
  void pause(WaitingFor waiting_for) {
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, kInterruptSlice);
    if (interrupts_.interrupted()) throw Interrupted(waiting_for());
  }
  void restart() { pause_ = std::chrono::milliseconds(1); }

 private:
  const InterruptWatch interrupts_;
  std::chrono::milliseconds pause_{1};
};

// Publishes `mine` as this host's text of its next round on `topic`: the key prefix of
// that round (its n-th, counted in the store, n into `round`).
std::string publish(c10d::Store& store, const std::string& topic, int64_t host,
                    const std::string& mine, int64_t* round) {
  const std::string base = "quiver/agree/" + topic + "/";
  *round = store.add(base + "count/" + std::to_string(host), 1) - 1;
  const std::string prefix = base + std::to_string(*round) + "/";
  store.set(prefix + std::to_string(host), std::vector<uint8_t>(mine.begin(), mine.end()));
  return prefix;
}

// Counts this host as having read the round at `prefix`. Host 0, which holds the store
// when the group was made with init_process_group's tcp:// address, returns only once
// every host has: raising and exiting at once, it would take the store from a host still
// reading, which would then see a lost connection instead of the disagreement. The others
// need the store no more once their count is in, so they never wait on a store that may
// be gone.
void count_as_read(c10d::Store& store, const std::string& topic, const std::string& prefix,
                   int64_t host, int64_t num_hosts,
                   std::chrono::steady_clock::time_point deadline,
                   std::chrono::milliseconds timeout, StorePolls& polls) {
  const std::string read = prefix + "read";
  int64_t done = store.add(read, 1);
  while (host == 0 && done < num_hosts) {
    TORCH_CHECK(std::chrono::steady_clock::now() <= deadline, "host ", host, " waited ",
                timeout.count(), " ms for every host to read what the others said on ", topic,
                ": ", num_hosts - done, " of ", num_hosts,
                " had not (late, dead, or running other code)");
    polls.pause([&] { return "every host to read what the others said on " + topic; });
    done = store.add(read, 0);
  }
}

std::vector<std::string> agree_over_store(c10d::Store& store, const std::string& topic,
                                          int64_t host, int64_t num_hosts,
                                          const std::string& mine,
                                          std::chrono::milliseconds timeout,
                                          int64_t* round_out) {
  int64_t round = 0;
  const std::string prefix = publish(store, topic, host, mine, &round);
  if (round_out != nullptr) *round_out = round;
  std::vector<std::string> everyone(num_hosts);
  std::vector<bool> have(num_hosts, false);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  StorePolls polls;
  const auto back_off = [&] {
    polls.pause([&] {
      return "the hosts to agree on " + topic + " (host " + std::to_string(host) + " of " +
             std::to_string(num_hosts) + ")";
    });
  };
  for (;;) {
    bool missing = false;
    for (int64_t h = 0; h < num_hosts; ++h) {
      if (have[h]) continue;
      const std::string key = prefix + std::to_string(h);
      if (store.check({key})) {
        const std::vector<uint8_t> text = store.get(key);
        everyone[h].assign(text.begin(), text.end());
        have[h] = true;
      } else {
        missing = true;
      }
    }
    if (!missing) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::ostringstream late;
      int count = 0;
      for (int64_t h = 0; h < num_hosts; ++h) {
        if (!have[h]) late << (count++ ? ", " : "") << h;
      }
      TORCH_CHECK(false, "host ", host, " waited ", timeout.count(), " ms for ",
                  count == 1 ? "host " : "hosts ", late.str(), " to agree on ", topic,
                  ": ", count == 1 ? "it has" : "they have",
                  " not reached the same point (late, dead, or running other code)");
    }
    back_off();
  }
  polls.restart();
  count_as_read(store, topic, prefix, host, num_hosts, deadline, timeout, polls);
  return everyone;
}

}  // namespace

std::vector<std::string> agree_among_hosts(c10d::Store& store, const std::string& topic,
                                           int64_t host, int64_t num_hosts,
                                           const std::string& mine,
                                           std::chrono::milliseconds timeout, int64_t* round_out) {
  TORCH_CHECK_VALUE(host >= 0 && host < num_hosts, "host ", host, " is out of range [0, ",
                    num_hosts, ")");
  try {
    return agree_over_store(store, topic, host, num_hosts, mine, timeout, round_out);
  } catch (const c10::DistNetworkError& error) {
    // torch's own message names neither a host nor the step (a probe met it in set-up).
    C10_THROW_ERROR(DistNetworkError,
                    "host " + std::to_string(host) + " of " + std::to_string(num_hosts) +
                        " lost the rendezvous store while the hosts agreed on " + topic +
                        " (the store lives in host 0's process, or in torchrun's on the " +
                        "first node: it may have ended): " + error.what_without_backtrace());
  }
}

void tell_hosts(c10d::Store& store, const std::string& topic, int64_t host, int64_t num_hosts,
                const std::string& mine, std::chrono::milliseconds timeout) {
  TORCH_CHECK_VALUE(host >= 0 && host < num_hosts, "host ", host, " is out of range [0, ",
                    num_hosts, ")");
  int64_t round = 0;
  const std::string prefix = publish(store, topic, host, mine, &round);
  // Nothing of the others' to read: counted as read at once (host 0 still waits for the
  // others' reads, as in an agreement, so as not to take the store from them).
  StorePolls polls;
  count_as_read(store, topic, prefix, host, num_hosts,
                std::chrono::steady_clock::now() + timeout, timeout, polls);
}

void wait_for_keys(c10d::Store& store, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout, const std::string& waiting_for) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  StorePolls polls;
  for (;;) {
    if (store.check(keys)) return;  // one request for them all: every host polls the store
    if (std::chrono::steady_clock::now() > deadline) {
      std::ostringstream names;
      int count = 0;
      for (const std::string& key : keys) {
        if (!store.check({key})) names << (count++ ? ", " : "") << key;
      }
      TORCH_CHECK(false, "waited ", timeout.count(), " ms for ", waiting_for,
                  "; still missing from the store: ", names.str());
    }
    polls.pause([&] { return waiting_for; });
  }
}

std::chrono::milliseconds checked_timeout(double seconds, const char* name) {
  constexpr double kYear = 365.0 * 24 * 3600;
  TORCH_CHECK_VALUE(std::isfinite(seconds) && seconds > 0 && seconds <= kYear, name,
                    " must be a number of seconds in (0, ", kYear, "], got ", seconds);
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(seconds * 1000)));
}

}  // namespace quiver::runtime
