// What the hosts of a distributed job agree on before they exchange anything: each host
// publishes a few words about itself through the rendezvous store (the c10d store that
// torchrun and init_process_group set up) and reads every other host's, within a timeout.
// So a mismatch (another shard map, another dtype, a host that cannot serve) is found by
// every host at once, before any collective could pair one host's request with another's
// unrelated one, and a late or dead host is named instead of waited for.
#pragma once

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace quiver::runtime {

// Every host of `num_hosts` publishes `mine` under `topic` and gets every host's text, in
// host order (its own included). The n-th call for a topic on one host meets the n-th call
// for it on every other (counted in the store; `round`, when given, receives n). Raises
// RuntimeError naming the hosts that had not published within `timeout`.
std::vector<std::string> agree_among_hosts(c10d::Store& store, const std::string& topic,
                                           int64_t host, int64_t num_hosts,
                                           const std::string& mine,
                                           std::chrono::milliseconds timeout,
                                           int64_t* round = nullptr);

// This host's part of its next agreement on `topic`, published without waiting for the
// others' texts: a host that gives up before the agreement (its own arguments are wrong)
// tells the others, which meet `mine` in their agree_among_hosts, and raises at once.
// Host 0 alone waits, at most `timeout`, until the others have read it (it may hold the
// store).
void tell_hosts(c10d::Store& store, const std::string& topic, int64_t host, int64_t num_hosts,
                const std::string& mine, std::chrono::milliseconds timeout);

// Waits until every key of `keys` is in the store, at most `timeout`, looking for Ctrl-C
// between reads (Interrupted names `waiting_for`). Raises RuntimeError naming `waiting_for`
// and the keys still missing at the timeout.
void wait_for_keys(c10d::Store& store, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout, const std::string& waiting_for);

// `seconds` as a timeout: finite and > 0 (at most a year: a wait has to end), else a
// ValueError naming `name` and the value.
std::chrono::milliseconds checked_timeout(double seconds, const char* name);

}  // namespace quiver::runtime
