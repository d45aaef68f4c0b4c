// torch.classes.quiver.Transport: moves rows of the hosts' local tables (see
// <quiver/shard_map.h>) from the hosts that own them to the host that asks.
//
// Two kinds, behind one class:
//  - collective(group): torch.distributed collectives on a c10d process group whose ranks
//    are the hosts: NCCL between GPUs, Gloo on CPUs. Every host takes part in every fetch
//    (it serves its peers' requests from its own table while it asks for theirs), so all
//    hosts fetch once per step, as a training loop's batches do.
//  - rdma(group, table, ...): one-sided RDMA READs over reliable-connected queue pairs
//    (rdma-core verbs, loaded at run time): a host reads peers' registered tables without
//    their CPUs; endpoints are exchanged through the group's store (rdma_transport.cpp).
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
#include <torch/custom_class.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace quiver::runtime {

class Transport : public torch::CustomClassHolder {
 public:
  // Reads rows of this host's own table: local indices (int64, checked by the caller) ->
  // rows on the table's device. `into`, when defined, is where the transport wants them
  // (contiguous CPU rows of the table's shape and dtype): a serve that can gather there
  // does so and returns `into`; any other result the transport copies there.
  using Serve = std::function<at::Tensor(const at::Tensor& local_ids, const at::Tensor& into)>;
  // Takes rows of host `host`'s answer as they arrive: `rows` are its rows from the
  // `first_row`-th on, valid until the transport's next fetch.
  using Arrived = std::function<void(int64_t host, int64_t first_row, const at::Tensor& rows)>;

  class Impl {
   public:
    virtual ~Impl() = default;
    // For each host h, rows requests[h] (int64 local indices of h's table, possibly empty;
    // empty for this host) as one tensor per host on `device`, shaped like `like`'s rows.
    // `served_rows` is the size of this host's table: requests for rows outside it are
    // refused, and both sides raise. Throws RuntimeError naming the peer on failure. The
    // rows may view a buffer the transport reuses: they are valid until its next fetch.
    // With `arrived`, every row goes to it instead (in pieces, in any order, maybe while
    // others are still on their way, and before any verdict is checked) and fetch returns
    // nothing: the caller places rows while the rest travel. `tag` names the caller's table
    // (the same on every host): a collective fetch whose peers fetch for another tag raises
    // on every host.
    virtual std::vector<at::Tensor> fetch(const std::vector<at::Tensor>& requests,
                                          const Serve& serve, int64_t served_rows,
                                          const at::Tensor& like, const at::Device& device,
                                          const Arrived& arrived, int64_t tag) = 0;
    virtual std::string kind() const = 0;
    // The rendezvous store the hosts share, and how long a wait for a peer may last.
    virtual c10::intrusive_ptr<c10d::Store> store() const = 0;
    virtual std::chrono::milliseconds timeout() const = 0;
    virtual int64_t host() const = 0;
    virtual int64_t num_hosts() const = 0;
    // Whether every host must call fetch together (collectives) or each on its own (RDMA).
    virtual bool collective() const = 0;

    // The fetch in fixed slots (runtime/cuda/owner_slots.h), offered by collective transports
    // over GPUs: requests and rows travel in equal per-host blocks, so that no count is
    // read back before the rows move, and the host waits once. Every host of the group
    // takes this path together (it depends only on the transport).
    struct SlotLayout {
      int64_t capacity = 0;    // request slots per host, the same on every host
      int64_t row_header = 0;  // header rows before each host's block of rows
    };
    struct SlottedRows {
      // Bytes [num_hosts * (row_header + capacity), row_bytes]: host h's rows in block h,
      // after its header rows. Valid until the next fetch.
      at::Tensor rows;
      // False when some host asked some host for more rows than the capacity: the rows are
      // incomplete, every host knows it, and every host must fetch the same ids again
      // with fetch(). The capacity has grown for the next fetch.
      bool complete = true;
      std::vector<int64_t> extra;  // the caller's words, read back with the verdicts
    };
    virtual bool slotted() const { return false; }
    virtual SlotLayout slot_layout(int64_t row_bytes) const { return {}; }
    // `requests`: int64 [num_hosts, kSlotHeader + capacity] on the GPU, as laid out by
    // slot_ids_by_owner. `serve` must only enqueue its work on the current stream (a host
    // wait there could hang behind a peer that died) unless `serve_waits`, in which case
    // the transport waits for the requests first. `extra`: int64 words on the GPU to read
    // back in the fetch's one copy. `meanwhile` runs once the rows are on their way: work
    // the caller enqueues there runs beside the exchange instead of before it.
    virtual SlottedRows fetch_slotted(const at::Tensor& requests, const Serve& serve,
                                      bool serve_waits, int64_t served_rows, int64_t row_bytes,
                                      const at::Tensor& extra,
                                      const std::function<void()>& meanwhile) {
      TORCH_CHECK(false, "transport ", kind(), " has no slotted fetch");
    }
  };

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

  explicit Transport(std::unique_ptr<Impl> impl);

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
  // RdmaOptions' defaults for the options a caller may give by name (port, gid_index,
  // qps_per_peer, staging_bytes), so that Python fills in only what it is given.
  static c10::Dict<std::string, int64_t> rdma_defaults();

  std::string kind() const { return impl_->kind(); }
  int64_t host() const { return impl_->host(); }
  int64_t num_hosts() const { return impl_->num_hosts(); }
  bool is_collective() const { return impl_->collective(); }
  Impl& impl() { return *impl_; }
  // Held by whoever fetches (DistFeature): one fetch at a time per transport, whichever
  // object and thread asks.
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

 private:
  std::unique_ptr<Impl> impl_;
  std::mutex fetch_mutex_;
};

}  // namespace quiver::runtime
