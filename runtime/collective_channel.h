// A c10d process group (one rank per host) as the channel of the runtime's collective
// exchanges: all-to-alls each waited for at most a timeout, heartbeats that name the peers
// gone silent when one fails, and the failure that ends the channel (after a failed exchange
// the hosts may be out of step, so no exchange after it could pair). One way for every
// runtime class that exchanges over a group: the collective transport's two exchanges
// (runtime/collective_transport.cpp, runtime/slot_exchange.h) share one, DistSampler has
// its own.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace quiver::runtime {

class PeerWatch;

class CollectiveChannel {
 public:
  // Exchanges over `group` (this host is its rank), and over `lanes` (more Gloo groups of
  // the same hosts, checked here; runtime/lane_exchange.h). Every host makes its channels of
  // one `kind` over a group in the same order: the n-th of each shares its heartbeat keys,
  // under "quiver/<kind>/" in the group's store. `owner` names the owner in every error
  // ("quiver transport (collective:gloo, host 0 of 2): ...").
  CollectiveChannel(c10::intrusive_ptr<c10d::ProcessGroup> group,
                    std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> lanes,
                    std::chrono::milliseconds timeout, const std::string& kind,
                    std::string owner);
  ~CollectiveChannel();
  CollectiveChannel(const CollectiveChannel&) = delete;
  CollectiveChannel& operator=(const CollectiveChannel&) = delete;

  c10d::ProcessGroup& group() const { return *group_; }
  const std::vector<c10::intrusive_ptr<c10d::ProcessGroup>>& lanes() const { return lanes_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  int64_t host() const { return host_; }
  int64_t num_hosts() const { return num_hosts_; }
  // This channel's place among the group's channels of its kind: the same on every host.
  int64_t serial() const { return serial_; }
  // Whether the group moves GPU tensors (NCCL).
  bool uses_gpus() const { return uses_gpus_; }

  // One all-to-all (empty splits: equal blocks per host), waited for at most the timeout.
  void exchange(at::Tensor& into, at::Tensor& from, std::vector<int64_t> into_splits,
                std::vector<int64_t> from_splits, const char* what);
  // The same in two steps: posted, then waited for, so that work runs beside it.
  c10::intrusive_ptr<c10d::Work> post(at::Tensor& into, at::Tensor& from,
                                      std::vector<int64_t> into_splits,
                                      std::vector<int64_t> from_splits, const char* what);
  void await(const c10::intrusive_ptr<c10d::Work>& work, const char* what);
  // Over NCCL: the current stream waits for `work`, the host does not (a later await of a
  // collective posted after it bounds the wait). Over Gloo, await.
  void order_after(const c10::intrusive_ptr<c10d::Work>& work, const char* what);
  // Rows over the lanes side by side (exchange_over_lanes), failing as the others do.
  void exchange_over_lanes(at::Tensor& into, const at::Tensor& from,
                           const std::vector<int64_t>& into_rows,
                           const std::vector<int64_t>& from_rows, int64_t header,
                           const char* what);

  // An exchange (`what`) failed with `error`: the channel records why, naming the silent
  // peers, and raises; every later use raises with that reason.
  [[noreturn]] void fail(const char* what, const std::exception& error);
  // A step of the hosts' lockstep stopped on this host for `why` (its own error, raised by
  // the caller): the channel refuses every later use, as after a failed exchange, since its
  // next exchange would pair with the peers' later ones. Keeps an earlier reason.
  void abandon(const std::string& why);
  // Raises when an exchange failed before.
  void check_not_broken() const;
  // "quiver transport (collective:gloo, host 0 of 2)": how the errors begin.
  const std::string& owner() const { return owner_; }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> lanes_;
  std::chrono::milliseconds timeout_;
  int64_t host_;
  int64_t num_hosts_;
  bool uses_gpus_;
  int64_t serial_ = 0;
  std::string owner_;
  std::unique_ptr<PeerWatch> watch_;
  // All-to-alls posted (from any thread): the hosts' step count, for naming a slow one.
  std::atomic<int64_t> posted_{0};
  std::string broken_;  // why an exchange failed, else empty
};

// A stretch of a step between two of the hosts' exchanges: left by an exception (this host's
// own failure, such as a buffer it could not allocate or a read of its table), the peers
// wait in an exchange this host will not join, so the channel is abandoned and refuses
// later use (which would pair with the peers' later exchanges). Errors that every host
// raises together, in step, belong outside such a stretch.
class MidExchange {
 public:
  MidExchange(CollectiveChannel& channel, const char* stretch)
      : channel_(channel), stretch_(stretch), exceptions_(std::uncaught_exceptions()) {}
  ~MidExchange() {
    if (std::uncaught_exceptions() > exceptions_) {
      channel_.abandon(std::string("it raised between the exchanges of ") + stretch_);
    }
  }
  MidExchange(const MidExchange&) = delete;
  MidExchange& operator=(const MidExchange&) = delete;

 private:
  CollectiveChannel& channel_;
  const char* stretch_;
  int exceptions_;
};

}  // namespace quiver::runtime
