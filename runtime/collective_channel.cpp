#include "runtime/collective_channel.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "runtime/collective_wait.h"
#include "runtime/error_message.h"
#include "runtime/interrupt_watch.h"
#include "runtime/lane_exchange.h"
#include "runtime/peer_watch.h"

namespace quiver::runtime {
namespace {

// Heartbeats run at this fraction of the timeout (at least every 100 ms; at most every
// kLongestBeat, or kBeatPerHost per host in larger groups, whose store calls grow with the
// square of their size), and a peer is called silent after this many periods without a beat.
// The cap names a peer whose process died within seconds whatever the timeout: at a tenth
// of torchrun's 120 s, one took 36-48 s to be named (a probe).
constexpr int64_t kBeatsPerTimeout = 10;
constexpr std::chrono::milliseconds kLongestBeat{1000};
constexpr std::chrono::milliseconds kBeatPerHost{30};
constexpr int kSilentPeriods = 3;

// Groups whose collective was left running when a wait for it ended on Ctrl-C, held until
// the process ends and never destroyed: a Gloo group's destructor joins its worker threads,
// which wait in that collective until the peers answer or its timeout passes (a minute by
// default), and would hold up the exit the Ctrl-C asked for.
void keep_until_exit(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  static auto* const kept_mutex = new std::mutex();  // never destroyed, as what it guards
  static auto* const kept = new std::vector<c10::intrusive_ptr<c10d::ProcessGroup>>();
  const std::lock_guard<std::mutex> lock(*kept_mutex);
  kept->push_back(group);
}

}  // namespace

CollectiveChannel::CollectiveChannel(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                     std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> lanes,
                                     std::chrono::milliseconds timeout, const std::string& kind,
                                     std::string owner)
    : group_(std::move(group)),
      lanes_(std::move(lanes)),
      timeout_(timeout),
      host_(group_->getRank()),
      num_hosts_(group_->getSize()),
      uses_gpus_(group_->getBackendName() == "nccl"),
      owner_(std::move(owner)) {
  check_lanes(lanes_, *group_, owner_.c_str());
  const std::string keys = "quiver/" + kind + "/";
  serial_ = group_->getStore()->add(keys + "made/" + std::to_string(host_), 1) - 1;
  const std::chrono::milliseconds longest = std::max(kLongestBeat, kBeatPerHost * num_hosts_);
  const auto period = std::clamp<std::chrono::milliseconds>(
      timeout_ / kBeatsPerTimeout, std::chrono::milliseconds(100), longest);
  watch_ = std::make_unique<PeerWatch>(group_->getStore(),
                                       keys + "beat/" + std::to_string(serial_) + "/",
                                       static_cast<int>(host_), static_cast<int>(num_hosts_),
                                       period);
}

CollectiveChannel::~CollectiveChannel() {
  watch_.reset();
  // The last reference to a process group may be this one, dropped from Python with the
  // GIL held (at interpreter exit, say), while a backend thread of the group waits for the
  // GIL to finish a callback: destroying the group here would wait for that thread
  // forever. A thread of its own destroys such a group, as torch's own bindings do
  // without the GIL. A group someone else still holds is only let go of, here: a
  // destroying thread still running when the process exits aborts it ("terminate
  // called without an active exception", seen under load at the end of a training run).
  std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> last_held;
  lanes_.push_back(std::move(group_));
  for (auto& group : lanes_) {
    if (group.use_count() == 1) last_held.push_back(std::move(group));
  }
  lanes_.clear();
  if (!last_held.empty()) {
    std::thread([groups = std::move(last_held)]() mutable { groups.clear(); }).detach();
  }
}

void CollectiveChannel::exchange(at::Tensor& into, at::Tensor& from,
                                 std::vector<int64_t> into_splits,
                                 std::vector<int64_t> from_splits, const char* what) {
  await(post(into, from, std::move(into_splits), std::move(from_splits), what), what);
}

c10::intrusive_ptr<c10d::Work> CollectiveChannel::post(at::Tensor& into, at::Tensor& from,
                                                       std::vector<int64_t> into_splits,
                                                       std::vector<int64_t> from_splits,
                                                       const char* what) {
  watch_->reached(posted_.fetch_add(1, std::memory_order_relaxed) + 1);
  c10d::AllToAllOptions options;
  options.timeout = timeout_;
  try {
    return group_->alltoall_base(into, from, into_splits, from_splits, options);
  } catch (const std::exception& error) {
    fail(what, error);
  }
}

void CollectiveChannel::await(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  try {
    await_within(work, timeout_, /*poll=*/uses_gpus_);
  } catch (const std::exception& error) {
    fail(what, error);
  }
}

void CollectiveChannel::order_after(const c10::intrusive_ptr<c10d::Work>& work,
                                    const char* what) {
  if (!uses_gpus_) return await(work, what);
  try {
    work->wait();  // NCCL: without a timeout, orders the current stream only
  } catch (const std::exception& error) {
    fail(what, error);
  }
}

void CollectiveChannel::exchange_over_lanes(at::Tensor& into, const at::Tensor& from,
                                            const std::vector<int64_t>& into_rows,
                                            const std::vector<int64_t>& from_rows,
                                            int64_t header, const char* what) {
  const std::string over =
      std::string(what) + " over " + std::to_string(lanes_.size()) + " lanes";
  runtime::exchange_over_lanes(lanes_, host_, into, from, into_rows, from_rows, header, timeout_,
                               [&](const std::exception& error) { fail(over.c_str(), error); });
}

void CollectiveChannel::fail(const char* what, const std::exception& error) {
  if (dynamic_cast<const Interrupted*>(&error) != nullptr) {
    keep_until_exit(group_);
    for (const auto& lane : lanes_) keep_until_exit(lane);
    // Not the silent peers' names: looking for them could take periods of the heartbeat.
    broken_ = std::string("exchanging ") + what + ": " + error.what();
    TORCH_CHECK(false, owner_, ": ", broken_);
  }
  std::ostringstream why;
  why << "exchanging " << what << " failed: " << watch_->describe(watch_->period() * kSilentPeriods)
      << ". The collective said: " << message_of(error);
  broken_ = why.str();
  TORCH_CHECK(false, owner_, ": ", broken_);
}

void CollectiveChannel::abandon(const std::string& why) {
  if (broken_.empty()) broken_ = "a step stopped midway on this host: " + why;
}

void CollectiveChannel::check_not_broken() const {
  TORCH_CHECK(broken_.empty(), owner_,
              " failed before and cannot be used again (its hosts may be out of step; make a "
              "new one): ", broken_);
}

}  // namespace quiver::runtime
