// torch.classes.quiver.Transport: moves rows of the hosts' local tables (see
// <quiver/shard_map.h>) from the hosts that own them to the host that asks.
//
// Two protocols, each its own interface below, behind one class:
//  - RowReader, a one-sided pull: rdma(group, table, ...) reads peers' registered tables
//    with RDMA READs over reliable-connected queue pairs (rdma-core verbs, loaded at run
//    time), without their CPUs; endpoints are exchanged through the group's store
//    (rdma_transport.cpp).
//  - RowExchange, collectives: collective(group) exchanges over a c10d process group whose
//    ranks are the hosts (NCCL between GPUs, Gloo on CPUs). Every host takes part in every
//    exchange, serving its peers' requests from its own rows (LocalRows) while it asks for
//    theirs, so all hosts fetch once per step, as a training loop's batches do. Over NCCL
//    the transport also has the slotted exchange (runtime/slot_exchange.h), which takes
//    global ids on the GPU and returns their rows with one wait.
// Neither calls back into its caller: what a host serves reaches the transport as
// LocalRows, and the rows come back as the call's result.
//
// Failures (a peer that died, a stalled peer, a refused connection, a remote access error)
// raise a RuntimeError naming the peer, within the transport's timeout: a heartbeat in the
// group's store tells which peer went silent. A transport whose hosts fell out of step (an
// exchange failed) stays failed: its owner makes a new one.
//
// One fetch at a time: a transport serializes its callers (fetch_mutex). With a collective
// transport every host must also fetch in the same order: each fetch carries its caller's
// tag, and hosts whose fetches do not pair (two DistFeatures over one transport gathered by
// two threads) all raise rather than exchange unrelated rows.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/custom_class.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace quiver::runtime {

// The rows a host serves its peers in a collective exchange: a table's local rows.
class LocalRows {
 public:
  virtual ~LocalRows() = default;
  virtual int64_t num_rows() const = 0;
  // No rows, of the table's dtype and row shape ([0, *row_shape]).
  virtual at::Tensor empty_rows() const = 0;
  // Rows at `local_ids` (int64, each in [0, num_rows()), checked by the exchange) on
  // `device`. Where reads_on_stream(device), the read is only enqueued on the current
  // stream, and its faults wait for check_reads.
  virtual at::Tensor read(const at::Tensor& local_ids, const at::Device& device) = 0;
  // The same into `into` (contiguous CPU rows of the table's dtype and row shape): the
  // exchange's send buffer.
  virtual void read_into(const at::Tensor& local_ids, const at::Tensor& into) {
    into.copy_(read(local_ids, into.device()));
  }
  // Whether a read onto `device` runs on the current stream without the host waiting (an
  // exchange may then read between two collectives; a host wait there could hang behind a
  // peer that died).
  virtual bool reads_on_stream(const at::Device& device) const { return false; }
  // Raises what the reads enqueued since the last call found wrong. Call it once the
  // stream has passed them.
  virtual void check_reads() {}
};

// The pull protocol: rows read from peers without their taking part.
class RowReader {
 public:
  virtual ~RowReader() = default;
  // For each host h, rows requests[h] (int64 local indices of h's table, possibly empty;
  // empty for this host) as one tensor per host on `device`, shaped like `like`'s rows.
  // Throws naming the peer on failure (an IndexError for rows outside a peer's table).
  virtual std::vector<at::Tensor> read(const std::vector<at::Tensor>& requests,
                                       const at::Tensor& like, const at::Device& device) = 0;
};

// The exchange protocol: every host serves its peers while it asks.
class RowExchange {
 public:
  virtual ~RowExchange() = default;
  // As RowReader::read, with this host serving its peers' requests from `mine` (requests
  // for rows outside it are refused, and both sides raise). The rows may view a buffer the
  // exchange reuses: they are valid until its next exchange. `tag` names the caller's table
  // (the same on every host): an exchange whose peers exchange for another tag raises on
  // every host.
  virtual std::vector<at::Tensor> exchange(const std::vector<at::Tensor>& requests,
                                           LocalRows& mine, const at::Device& device,
                                           int64_t tag) = 0;
};

class SlotExchange;  // runtime/slot_exchange.h

class Transport : public torch::CustomClassHolder {
 public:
  // How an RDMA transport connects and reads.
  struct RdmaOptions {
    std::string device;  // "" = the first RDMA device
    int64_t port = 1;
    int64_t gid_index = -1;            // -1: RoCE v2 over IPv4 if the port has it, else 0
    int64_t qps_per_peer = 4;          // reliable-connected queue pairs to each peer
    int64_t staging_bytes = 64 << 20;  // registered buffer the reads land in
    int64_t reads_in_flight = 256;     // per queue pair (capped by the device)
    double timeout_s = 30;             // a fetch's completions, and connecting
  };

  // What a transport is made of: the hosts it connects, and how it moves rows (a reader,
  // or an exchange and, over NCCL, the slotted exchange).
  struct Parts {
    std::string kind;  // "rdma:<device>", "collective:<backend>"
    c10::intrusive_ptr<c10d::Store> store;  // the hosts' rendezvous store
    std::chrono::milliseconds timeout;      // how long a wait for a peer may last
    int64_t host = 0;
    int64_t num_hosts = 1;
    std::unique_ptr<RowReader> reader;
    std::unique_ptr<RowExchange> exchange;
    std::shared_ptr<SlotExchange> slots;
  };
  explicit Transport(Parts parts);

  // Collectives over `group` (its rank is this host), each waited for at most timeout_s.
  // `lanes`: more groups over the same hosts (Gloo only, else empty) that the rows travel
  // over in parallel, each its own connections: one TCP stream carries about 2 GB/s.
  static c10::intrusive_ptr<Transport> collective(
      const c10::intrusive_ptr<c10d::ProcessGroup>& group, double timeout_s,
      std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> lanes);

  // One-sided RDMA READs: this host serves `table` (contiguous host memory: its local
  // table, registered read-only for peers) and reads its peers'. Endpoints (queue pair
  // numbers, GID, remote key, address, size) are exchanged through `store`; every host
  // builds its transport at the same point. Throws explaining what is missing where
  // rdma-core, a device or the build's verbs headers are.
  static c10::intrusive_ptr<Transport> rdma(const c10::intrusive_ptr<c10d::Store>& store,
                                            int64_t host, int64_t num_hosts, at::Tensor table,
                                            const RdmaOptions& options);
  // The same from TorchScript / Python: host and store from `group`.
  static c10::intrusive_ptr<Transport> rdma_over(
      const c10::intrusive_ptr<c10d::ProcessGroup>& group, at::Tensor table, std::string device,
      int64_t port, int64_t gid_index, int64_t qps_per_peer, int64_t staging_bytes,
      double timeout_s);
  // Whether this build has verbs, libibverbs loads and lists a device.
  static bool rdma_available();
  // The RDMA devices this host lists (what the `device` option may name).
  static std::vector<std::string> rdma_devices();
  // RdmaOptions' defaults for the options a caller may give by name (port, gid_index,
  // qps_per_peer, staging_bytes), so that Python fills in only what it is given.
  static c10::Dict<std::string, int64_t> rdma_defaults();
  // Raises ValueError naming the first of those options out of its range: the transport
  // checks them so, and Python asks first so that every host hears of a refusal at once.
  static void check_rdma_options(int64_t port, int64_t gid_index, int64_t qps_per_peer,
                                 int64_t staging_bytes);
  // At most this many queue pairs to each peer (an endpoint's fixed arrays hold them).
  static constexpr int64_t kMaxQpsPerPeer = 16;
  // At most this large a staging buffer: reads land in it slice after slice, so a larger
  // one gains nothing, and it is pinned (registered) memory the host may not have.
  static constexpr int64_t kMaxStagingBytes = int64_t{1} << 30;

  const std::string& kind() const { return parts_.kind; }
  int64_t host() const { return parts_.host; }
  int64_t num_hosts() const { return parts_.num_hosts; }
  // Whether every host must fetch together (an exchange) or each on its own (a reader).
  bool is_collective() const { return parts_.exchange != nullptr; }
  std::chrono::milliseconds timeout() const { return parts_.timeout; }

  // For each host h, rows requests[h] (int64 local indices of h's table; none of this
  // host's) on `device`: read from the peers, or exchanged, this host serving `mine` (with
  // a collective transport every host calls fetch together; see RowExchange). `mine` also
  // gives the rows' dtype and shape.
  std::vector<at::Tensor> fetch(const std::vector<at::Tensor>& requests, LocalRows& mine,
                                const at::Device& device, int64_t tag);
  // The slotted exchange (NCCL transports in a CUDA build), else null.
  SlotExchange* slots() const { return parts_.slots.get(); }
  // Held by whoever fetches (DistFeature, DistSampler): one fetch at a time per transport,
  // whichever object and thread asks.
  std::mutex& fetch_mutex() { return fetch_mutex_; }

  // Every host publishes `mine` under `topic` and gets every host's text, in host order,
  // through the group's store within the transport's timeout (runtime/host_agreement.h);
  // `round`, when given, receives how many agreements on `topic` came before this one.
  std::vector<std::string> agree(const std::string& topic, const std::string& mine,
                                 int64_t* round = nullptr);
  // The same before any transport exists: over `group`'s store, within timeout_s.
  static std::vector<std::string> agree_over(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                             const std::string& topic, const std::string& mine,
                                             double timeout_s);
  // This host's part of its next agreement on `topic`, without waiting for the others'
  // texts (runtime/host_agreement.h tell_hosts): for a host that raises instead of
  // agreeing.
  static void tell_over(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                        const std::string& topic, const std::string& mine, double timeout_s);

 private:
  Parts parts_;
  std::mutex fetch_mutex_;
};

}  // namespace quiver::runtime
