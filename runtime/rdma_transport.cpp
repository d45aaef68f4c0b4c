// Transport::rdma: rows read with one-sided RDMA READs over reliable-connected queue pairs.
//
// Each host registers its local table once, read-only for peers (IBV_ACCESS_REMOTE_READ,
// nothing else), and a staging buffer for the rows it reads. It opens qps_per_peer RC queue
// pairs to every peer, addressed by GID (so RoCE and InfiniBand both work), at the port's
// active MTU, and publishes (queue pair numbers, GID, LID, PSN, remote key, address, size)
// in the store. A fetch posts one READ per row, in chains of work requests of which only
// the last is signaled, spread over the peer's queue pairs with many in flight; the NIC
// writes the rows into the staging buffer, which reaches the caller's device in one copy.
// Completions are polled against a deadline (one per chunk of rows, however long the wait
// for room on a queue pair): an error completion or a silent peer raises naming the peer.
// A failed transport stays failed (its queue pairs are in the error state); its owner makes
// a new one.
//
// The served table's memory is held for as long as the registration (runtime/held_memory.h):
// if the table moves (share_memory_ when it is pickled for workers), peers go on reading
// the registered bytes, which stay allocated, instead of memory that was freed.
//
// Trust: endpoints (queue pair numbers, GID, remote key, address) travel in plain text
// through the rendezvous store, as torch.distributed's own data does, and RoCE has no
// authentication: every host and the store must be trusted (the hosts of one job on a
// private network). The remote key grants reads of the served table only.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <quiver/transport.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "ops/checks.h"
#include "ops/errors.h"
#include "runtime/error_message.h"
#include "runtime/held_memory.h"
#include "runtime/host_agreement.h"
#include "runtime/interrupt_watch.h"
#include "runtime/peer_watch.h"
#include "runtime/rdma_test_hooks.h"

#ifdef QUIVER_WITH_RDMA
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <sys/resource.h>

#include "runtime/verbs.h"
#endif

namespace quiver::runtime {

#ifdef QUIVER_WITH_RDMA
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxQpsPerPeer = static_cast<int>(Transport::kMaxQpsPerPeer);
constexpr int kChain = 16;  // work requests per posted chain; the last one is signaled
constexpr int64_t kMaxReadBytes = 1 << 20;  // one READ covers consecutive rows up to this

// What a host tells a peer about itself, through the store.
struct Endpoint {
  uint32_t qpn[kMaxQpsPerPeer];
  uint32_t psn[kMaxQpsPerPeer];  // random, per queue pair
  uint32_t num_qps;
  uint16_t lid;
  uint8_t gid[16];
  uint32_t mtu;  // ibv_mtu
  uint32_t rkey;
  uint64_t addr;
  uint64_t bytes;
  uint64_t row_bytes;
  int32_t dtype;  // c10::ScalarType of the served rows
};

std::string key(int64_t serial, int64_t from, int64_t to) {
  return "quiver/rdma/" + std::to_string(serial) + "/" + std::to_string(from) + "/" +
         std::to_string(to);
}

// Where a host that fails to set up its transport says why, so that its peers raise at
// once with its reason instead of waiting out the timeout for its endpoint.
std::string failed_key(int64_t serial, int64_t host) {
  return "quiver/rdma/" + std::to_string(serial) + "/failed/" + std::to_string(host);
}

// How many hosts of a turn have failed: one read a poll, whatever the number of hosts.
std::string failures_key(int64_t serial) {
  return "quiver/rdma/" + std::to_string(serial) + "/failures";
}

// The pause between two polls of the store while hosts connect: short at first (they
// usually connect at once), then longer, so that many hosts polling do not load it.
std::chrono::milliseconds next_pause(std::chrono::milliseconds pause) {
  return std::min(pause * 2, std::chrono::milliseconds(50));
}

// A GID as sysfs writes it (eight groups of four hex digits).
std::string gid_text(const uint8_t* gid) {
  std::ostringstream text;
  for (int i = 0; i < 16; i += 2) {
    if (i) text << ':';
    text << std::hex;
    text.width(2);
    text.fill('0');
    text << static_cast<int>(gid[i]);
    text.width(2);
    text.fill('0');
    text << static_cast<int>(gid[i + 1]);
  }
  return text.str();
}

// Whether a GID holds an IPv4 address (::ffff:a.b.c.d, RoCE over IPv4).
bool ipv4_gid(const uint8_t* gid) {
  return std::all_of(gid, gid + 10, [](uint8_t byte) { return byte == 0; }) && gid[10] == 0xff &&
         gid[11] == 0xff;
}

// The index of the port's RoCE v2 GID over IPv4 (what rxe and RoCE NICs route), read from
// sysfs; -1 when there is none.
int roce_v2_ipv4_gid(const std::string& device, int port, int table_size) {
  for (int index = 0; index < table_size; ++index) {
    std::ifstream type("/sys/class/infiniband/" + device + "/ports/" + std::to_string(port) +
                       "/gid_attrs/types/" + std::to_string(index));
    std::string text;
    if (!std::getline(type, text) || text.find("v2") == std::string::npos) continue;
    std::ifstream gid("/sys/class/infiniband/" + device + "/ports/" + std::to_string(port) +
                      "/gids/" + std::to_string(index));
    std::string value;
    if (std::getline(gid, value) && value.rfind("0000:0000:0000:0000:0000:ffff:", 0) == 0) {
      return index;
    }
  }
  return -1;
}

class RdmaReader final : public RowReader {
 public:
  RdmaReader(c10::intrusive_ptr<c10d::Store> store, int64_t host, int64_t num_hosts,
                at::Tensor table, const Transport::RdmaOptions& options,
                const RdmaTestHooks& hooks)
      : store_(std::move(store)),
        host_(host),
        num_hosts_(num_hosts),
        options_(options),
        hooks_(hooks),
        table_(std::move(table)) {
    TORCH_CHECK_VALUE(host >= 0 && host < num_hosts, "host ", host, " is out of range [0, ",
                      num_hosts, ")");
    // Every host makes its transports on a store in the same order, so the n-th one of each
    // host shares its keys (counted in the store: two hosts may share a process in tests).
    // Taken before any check: a host that refuses its options still uses up its turn, so
    // the hosts' next transports keep sharing keys.
    const int64_t serial = store_->add("quiver/rdma/made/" + std::to_string(host_), 1) - 1;
    try {
      set_up(serial);
    } catch (const std::exception& error) {
      tell_peers_why(serial, message_of(error));
      throw;
    }
    watch_ = std::make_unique<PeerWatch>(
        store_, "quiver/rdma-heartbeat/" + std::to_string(serial) + "/", static_cast<int>(host_),
        static_cast<int>(num_hosts_), std::max(std::chrono::milliseconds(100), timeout_ / 10));
  }

 private:
  // The constructor's checks and connection, after its turn is taken.
  void set_up(int64_t serial) {
    const Transport::RdmaOptions& options = options_;
    timeout_ = checked_timeout(options.timeout_s, "timeout_s");
    Transport::check_rdma_options(options.port, options.gid_index, options.qps_per_peer,
                                  options.staging_bytes);
    TORCH_CHECK_VALUE(options.reads_in_flight >= 1, "reads_in_flight must be >= 1, got ",
                      options.reads_in_flight);
    TORCH_CHECK_VALUE(table_.device().is_cpu() && table_.is_contiguous() && table_.dim() >= 1,
                      "an RDMA transport serves a contiguous host table, got one on ",
                      table_.device());
    row_bytes_ = row_bytes_of(table_);
    TORCH_CHECK_VALUE(row_bytes_ > 0, "an RDMA transport serves rows of at least one byte");
    // One READ moves one row: its length is a 32-bit field of the work request.
    TORCH_CHECK_VALUE(row_bytes_ < (int64_t{1} << 31), "an RDMA transport reads rows of less ",
                      "than 2 GiB, got rows of ", row_bytes_, " bytes");
    if (table_.numel() > 0) {
      served_hold_ = hold_storage_memory(table_.storage());
      served_address_ = table_.storage().data();
    }
    try {
      connect(serial);
    } catch (const c10::ValueError& error) {  // a ValueError still (options, GIDs, tables)
      TORCH_CHECK_VALUE(false, "quiver RDMA transport (host ", host_, " of ", num_hosts_,
                        "): could not connect: ", error.what_without_backtrace());
    } catch (const c10::Error& error) {  // its message, not the C++ frames behind it
      TORCH_CHECK(false, "quiver RDMA transport (host ", host_, " of ", num_hosts_,
                  "): could not connect: ", error.what_without_backtrace());
    } catch (const std::exception& error) {
      TORCH_CHECK(false, "quiver RDMA transport (host ", host_, " of ", num_hosts_,
                  "): could not connect: ", error.what());
    }
  }

  void tell_peers_why(int64_t serial, const std::string& why) {
    try {
      store_->set(failed_key(serial, host_), std::vector<uint8_t>(why.begin(), why.end()));
      store_->add(failures_key(serial), 1);  // after the reason: a reader finds it there
    } catch (const std::exception&) {
      // the store is gone too: the peers' own waits will tell
    }
  }

  // Raises with a peer's own reason when one of `peers` has said it failed to set up (see
  // failed_key), naming what this host was waiting for.
  void check_peers_failed(int64_t serial, const std::vector<int64_t>& peers,
                          const char* waiting_for) {
    if (store_->add(failures_key(serial), 0) == 0) return;
    for (const int64_t peer : peers) {
      const std::string failed = failed_key(serial, peer);
      if (!store_->check({failed})) continue;
      const std::vector<uint8_t> why = store_->get(failed);
      TORCH_CHECK(false, "host ", peer, " failed to set up its RDMA transport while this host ",
                  "waited for ", waiting_for, ": ", std::string(why.begin(), why.end()));
    }
  }

 public:
  std::vector<at::Tensor> read(const std::vector<at::Tensor>& requests, const at::Tensor& like,
                               const at::Device& device) override {
    TORCH_CHECK(broken_.empty(), "quiver RDMA transport (host ", host_,
                ") failed before and "
                "cannot be used again: ",
                broken_);
    const int64_t wanted_row_bytes = row_bytes_of(like);
    TORCH_CHECK_VALUE(wanted_row_bytes == row_bytes_ && like.scalar_type() == table_.scalar_type(),
                      "rows of ", wanted_row_bytes, " bytes of ",
                      errors::dtype_name(like.scalar_type()),
                      " were asked for, but the served tables have rows of ", row_bytes_,
                      " bytes of ", errors::dtype_name(table_.scalar_type()));
    check_served_memory();
    std::vector<at::Tensor> ids(num_hosts_);
    int64_t total = 0;
    for (int64_t h = 0; h < num_hosts_; ++h) {
      ids[h] = requests[h].to(at::kCPU, at::kLong).contiguous();
      total += ids[h].numel();
      TORCH_CHECK_VALUE(h != host_ || ids[h].numel() == 0, "an RDMA transport does not read ",
                        "from its own host (", host_, ")");
      // Every row is checked before any read is posted: a refusal must not leave reads in
      // flight into the staging buffer that the next fetch reuses.
      if (h != host_ && ids[h].numel() > 0 && !hooks_.unchecked) {
        const auto [low, high] = at::aminmax(ids[h]);
        const int64_t lowest = low.item<int64_t>(), highest = high.item<int64_t>();
        const int64_t bad = lowest < 0 ? lowest : highest;
        TORCH_CHECK_INDEX(lowest >= 0 && static_cast<uint64_t>(highest) < peers_[h].rows, "row ",
                          bad, " of host ", h, "'s table was asked for, but it serves ",
                          peers_[h].rows, " rows");
      }
    }
    at::Tensor out = at::empty(rows_like(like, total), like.options().device(device));
    if (total == 0) {  // nothing remote (an empty batch, or every row held here)
      return std::vector<at::Tensor>(num_hosts_, out);
    }
    at::Tensor out_bytes =
        out.view({total, row_bytes_ / static_cast<int64_t>(out.element_size())}).view(at::kByte);
    // Rows in request order, peer after peer, through the staging buffer a chunk at a time.
    const int64_t chunk_rows = std::max<int64_t>(1, staging_.numel() / row_bytes_);
    interrupts_ = InterruptWatch();  // one for the fetch: a SIGINT in any chunk ends it
    int64_t row = 0;
    int64_t peer = 0, within = 0;
    while (row < total) {
      const int64_t take = std::min(chunk_rows, total - row);
      // One deadline for the whole chunk: the waits for room on a queue pair and for the
      // last completions all end by it, so a peer that died mid-fetch is named in time.
      const auto deadline = Clock::now() + timeout_;
      int64_t slot = 0;
      while (slot < take) {
        while (within == ids[peer].numel()) {
          ++peer;
          within = 0;
        }
        const int64_t n = std::min(take - slot, ids[peer].numel() - within);
        post_reads(peer, ids[peer].narrow(0, within, n), slot, deadline);
        slot += n;
        within += n;
      }
      wait_for_reads(deadline);
      out_bytes.narrow(0, row, take)
          .copy_(staging_.narrow(0, 0, take * row_bytes_).view({take, row_bytes_}));
      row += take;
    }
    std::vector<at::Tensor> parts;
    int64_t begin = 0;
    for (int64_t h = 0; h < num_hosts_; ++h) {
      parts.push_back(out.narrow(0, begin, ids[h].numel()));
      begin += ids[h].numel();
    }
    return parts;
  }

  const std::string& device_name() const { return device_name_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Peer {
    std::vector<verbs::Qp> qps;
    std::vector<uint32_t> psn;  // this host's starting sequence number on each queue pair
    std::vector<int64_t> in_flight;  // posted, not yet completed, per queue pair
    // When a read from it last completed, or reads were posted with none in flight: a peer
    // whose reads complete is alive whatever its heartbeat says.
    Clock::time_point last_progress{};
    int64_t next_qp = 0;
    uint64_t addr = 0;
    uint64_t rows = 0;
    uint32_t rkey = 0;
  };

  void connect(int64_t serial) {
    const verbs::Api& api = verbs::api();
    context_ = verbs::open_device(options_.device);
    device_name_ = context_->device ? api.get_device_name(context_->device) : options_.device;
    ibv_device_attr device_attr{};
    TORCH_CHECK(api.query_device(context_.get(), &device_attr) == 0, "ibv_query_device failed");
    const auto port = static_cast<uint8_t>(options_.port);
    ibv_port_attr port_attr{};
    TORCH_CHECK(api.query_port(context_.get(), port, &port_attr) == 0, "ibv_query_port failed on ",
                device_name_, " port ", options_.port);
    TORCH_CHECK(port_attr.state == IBV_PORT_ACTIVE, device_name_, " port ", options_.port,
                " is not active (state ", port_attr.state, ")");
    int gid_index = static_cast<int>(options_.gid_index);
    if (gid_index < 0) {
      gid_index = port_attr.link_layer == IBV_LINK_LAYER_ETHERNET
                      ? std::max(0, roce_v2_ipv4_gid(device_name_, port, port_attr.gid_tbl_len))
                      : 0;
    }
    gid_index_ = gid_index;
    ibv_gid gid{};
    TORCH_CHECK(api.query_gid(context_.get(), port, gid_index, &gid) == 0, "ibv_query_gid failed ",
                "for index ", gid_index);
    const bool empty_gid = std::all_of(std::begin(gid.raw), std::end(gid.raw),
                                       [](uint8_t byte) { return byte == 0; });
    TORCH_CHECK_VALUE(!empty_gid, "gid_index ", gid_index, " of ", device_name_, " port ",
                      options_.port, " holds no GID (the port's table has ",
                      port_attr.gid_tbl_len, " entries; -1 picks RoCE v2 over IPv4)");
    reads_per_qp_ = std::max<int64_t>(1, std::min<int64_t>(options_.reads_in_flight,
                                                            device_attr.max_qp_wr));
    // A provider that leaves max_msg_sz at 0 states no limit.
    TORCH_CHECK_VALUE(port_attr.max_msg_sz == 0 ||
                          static_cast<uint64_t>(row_bytes_) <= port_attr.max_msg_sz,
                      device_name_,
                      " reads at most ", port_attr.max_msg_sz, " bytes at once, but a row is ",
                      row_bytes_, " bytes");
    rd_atomic_ = std::max(1, std::min(device_attr.max_qp_rd_atom, device_attr.max_qp_init_rd_atom));

    pd_ = verbs::Pd(api.alloc_pd(context_.get()));
    TORCH_CHECK(pd_, "ibv_alloc_pd failed");
    void* served = table_.numel() ? table_.data_ptr() : &empty_byte_;
    const size_t served_bytes = table_.numel() ? table_.nbytes() : 1;
    served_ = verbs::Mr(api.reg_mr(pd_.get(), served, served_bytes, IBV_ACCESS_REMOTE_READ));
    TORCH_CHECK(served_, "ibv_reg_mr of the served table (", served_bytes,
                " bytes) failed: ", std::strerror(errno), " (", memlock_note(), ")");
    const int64_t staging_bytes = std::max(options_.staging_bytes, row_bytes_);
    staging_ =
        at::empty({staging_bytes}, at::TensorOptions(at::kByte).pinned_memory(at::hasCUDA()));
    staging_mr_ = verbs::Mr(
        api.reg_mr(pd_.get(), staging_.data_ptr(), staging_bytes, IBV_ACCESS_LOCAL_WRITE));
    TORCH_CHECK(staging_mr_, "ibv_reg_mr of the staging buffer (", staging_bytes,
                " bytes) failed: ", std::strerror(errno), " (", memlock_note(), ")");
    const int64_t qps = options_.qps_per_peer * std::max<int64_t>(num_hosts_ - 1, 1);
    const int cq_entries =
        static_cast<int>(std::min<int64_t>(qps * reads_per_qp_ + 16, device_attr.max_cqe));
    cq_ = verbs::Cq(api.create_cq(context_.get(), cq_entries, nullptr, nullptr, 0));
    TORCH_CHECK(cq_, "ibv_create_cq of ", cq_entries, " entries failed");

    // Packet sequence numbers start at random (not from the host's rank): a stale or forged
    // packet is then unlikely to fall in a queue pair's window.
    std::random_device random;
    peers_.resize(num_hosts_);
    for (int64_t h = 0; h < num_hosts_; ++h) {
      if (h == host_) continue;
      Endpoint mine{};
      for (int64_t k = 0; k < options_.qps_per_peer; ++k) {
        ibv_qp_init_attr init{};
        init.send_cq = cq_.get();
        init.recv_cq = cq_.get();
        init.qp_type = IBV_QPT_RC;
        init.cap.max_send_wr = static_cast<uint32_t>(reads_per_qp_);
        init.cap.max_recv_wr = 1;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        verbs::Qp qp(api.create_qp(pd_.get(), &init));
        TORCH_CHECK(qp, "ibv_create_qp failed (", std::strerror(errno), ")");
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = port;
        attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;  // peers may read what we serve
        TORCH_CHECK(api.modify_qp(
                        qp.get(), &attr,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
                    "moving a queue pair to INIT failed");
        mine.qpn[k] = qp->qp_num;
        mine.psn[k] = random() & 0xFFFFFF;
        peers_[h].qps.push_back(std::move(qp));
      }
      peers_[h].in_flight.assign(options_.qps_per_peer, 0);
      mine.num_qps = static_cast<uint32_t>(options_.qps_per_peer);
      peers_[h].psn.assign(mine.psn, mine.psn + options_.qps_per_peer);
      mine.lid = port_attr.lid;
      std::memcpy(mine.gid, gid.raw, 16);
      mine.mtu = port_attr.active_mtu;
      mine.rkey = served_->rkey;
      mine.addr = reinterpret_cast<uint64_t>(served);
      mine.bytes = table_.nbytes();
      mine.row_bytes = static_cast<uint64_t>(row_bytes_);
      mine.dtype = static_cast<int32_t>(table_.scalar_type());
      const auto* bytes = reinterpret_cast<const uint8_t*>(&mine);
      store_->set(key(serial, host_, h), std::vector<uint8_t>(bytes, bytes + sizeof(mine)));
    }
    for (int64_t h = 0; h < num_hosts_; ++h) {
      if (h == host_) continue;
      {
        const auto deadline = Clock::now() + timeout_;
        const InterruptWatch waiting;
        const std::string what = "host " + std::to_string(h) + "'s RDMA endpoint";
        auto pause = std::chrono::milliseconds(1);
        while (!store_->check({key(serial, h, host_)})) {
          check_peers_failed(serial, {h}, what.c_str());
          TORCH_CHECK(Clock::now() < deadline, "host ", h, " did not publish its endpoint within ",
                      timeout_.count(), " ms: it is late, or it runs other code");
          waiting.check(what.c_str());
          std::this_thread::sleep_for(pause = next_pause(pause));
        }
      }
      const std::vector<uint8_t> raw = store_->get(key(serial, h, host_));
      TORCH_CHECK(raw.size() == sizeof(Endpoint), "host ", h, " published a ", raw.size(),
                  "-byte endpoint; this build expects ", sizeof(Endpoint));
      Endpoint theirs{};
      std::memcpy(&theirs, raw.data(), sizeof(theirs));
      TORCH_CHECK(theirs.num_qps == static_cast<uint32_t>(options_.qps_per_peer), "host ", h,
                  " opened ", theirs.num_qps, " queue pairs to this host, this host ",
                  options_.qps_per_peer, ": give every host the same qps_per_peer");
      TORCH_CHECK_VALUE(theirs.row_bytes == static_cast<uint64_t>(row_bytes_) &&
                            theirs.dtype == static_cast<int32_t>(table_.scalar_type()),
                        "host ", h, " serves rows of ", theirs.row_bytes, " bytes of ",
                        peer_dtype_name(theirs.dtype), ", this host ", row_bytes_, " bytes of ",
                        errors::dtype_name(table_.scalar_type()),
                        ": every host must serve the same table layout");
      TORCH_CHECK(theirs.bytes % static_cast<uint64_t>(row_bytes_) == 0, "host ", h,
                  " published a table of ", theirs.bytes, " bytes, not a whole number of ",
                  row_bytes_, "-byte rows");
      // GIDs of two kinds (one IPv4, one not) cannot route to each other: moving the queue
      // pair to RTR would fail with EINVAL, naming neither gid_index.
      const auto kind = [](const uint8_t* g) { return ipv4_gid(g) ? "an IPv4" : "no IPv4"; };
      TORCH_CHECK_VALUE(ipv4_gid(theirs.gid) == ipv4_gid(gid.raw), "host ", h, "'s GID ",
                        gid_text(theirs.gid), " is ", kind(theirs.gid), " one but this host's ",
                        gid_text(gid.raw), " (gid_index ", gid_index_, " of ", device_name_,
                        ") is ", kind(gid.raw), " one: give every host a gid_index of one "
                        "kind (-1 picks RoCE v2 over IPv4 on each)");
      Peer& peer = peers_[h];
      peer.addr = theirs.addr;
      peer.rows = row_bytes_ ? theirs.bytes / row_bytes_ : 0;
      peer.rkey = hooks_.wrong_rkey ? theirs.rkey ^ 0x5a5a : theirs.rkey;
      for (int64_t k = 0; k < options_.qps_per_peer; ++k) {
        ready_to_send(h, peer.qps[k].get(), theirs, theirs.qpn[k], theirs.psn[k], peer.psn[k],
                      static_cast<ibv_mtu>(std::min<uint32_t>(theirs.mtu, port_attr.active_mtu)));
      }
    }
    // Every host connected before anyone reads: a READ to a queue pair not yet ready to
    // receive would be refused.
    store_->add("quiver/rdma/" + std::to_string(serial) + "/ready", 1);
    const auto deadline = Clock::now() + timeout_;
    const InterruptWatch connecting;
    std::vector<int64_t> peers;
    for (int64_t h = 0; h < num_hosts_; ++h) {
      if (h != host_) peers.push_back(h);
    }
    auto pause = std::chrono::milliseconds(1);
    while (store_->add("quiver/rdma/" + std::to_string(serial) + "/ready", 0) < num_hosts_) {
      check_peers_failed(serial, peers, "every host to connect");
      TORCH_CHECK(Clock::now() < deadline, "not every host connected within ", options_.timeout_s,
                  " s");
      connecting.check("every host to connect its RDMA queue pairs");
      std::this_thread::sleep_for(pause = next_pause(pause));
    }
  }

  void ready_to_send(int64_t peer, ibv_qp* qp, const Endpoint& theirs, uint32_t remote_qpn,
                     uint32_t remote_psn, uint32_t psn, ibv_mtu mtu) {
    const verbs::Api& api = verbs::api();
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = mtu;
    attr.dest_qp_num = remote_qpn;
    attr.rq_psn = remote_psn;
    attr.max_dest_rd_atomic = static_cast<uint8_t>(rd_atomic_);
    attr.min_rnr_timer = 12;
    attr.ah_attr.is_global = 1;  // GID addressing: RoCE needs it, InfiniBand accepts it
    std::memcpy(attr.ah_attr.grh.dgid.raw, theirs.gid, 16);
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
    attr.ah_attr.grh.hop_limit = 64;
    attr.ah_attr.dlid = theirs.lid;
    attr.ah_attr.port_num = static_cast<uint8_t>(options_.port);
    // (ibv_modify_qp returns the error number; errno is not promised)
    if (const int error = api.modify_qp(qp, &attr,
                                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                            IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
      TORCH_CHECK(false, "moving a queue pair to RTR failed (", std::strerror(error),
                  ") toward host ", peer, "'s GID ", gid_text(theirs.gid),
                  " from this host's gid_index ", gid_index_, " of ", device_name_, " port ",
                  options_.port);
    }
    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.timeout = 14;  // 4.096 us * 2^14 = 67 ms per try
    rts.retry_cnt = 7;
    rts.rnr_retry = 7;
    rts.sq_psn = psn;
    rts.max_rd_atomic = static_cast<uint8_t>(rd_atomic_);
    TORCH_CHECK(api.modify_qp(qp, &rts,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
                "moving a queue pair to RTS failed (", std::strerror(errno), ")");
  }

  static uint64_t wr_id(int64_t peer, int64_t qp, int64_t count) {
    return (static_cast<uint64_t>(peer) << 48) | (static_cast<uint64_t>(qp) << 32) |
           static_cast<uint64_t>(count);
  }

  // Posts READs of rows `rows` (local indices of peer's table, checked by the caller) into
  // staging slots from `slot` on, in signaled chains spread over the peer's queue pairs;
  // waits for room on a queue pair until `deadline` at the latest.
  void post_reads(int64_t peer_index, const at::Tensor& rows, int64_t slot,
                  Clock::time_point deadline) {
    Peer& peer = peers_[peer_index];
    const int64_t* index = rows.const_data_ptr<int64_t>();
    const int64_t n = rows.numel();
    auto* staging = static_cast<uint8_t*>(staging_.data_ptr());
    ibv_send_wr wrs[kChain];
    ibv_sge sges[kChain];
    // A chain never holds more reads than a queue pair may have in flight.
    const int64_t chain = std::min<int64_t>(kChain, reads_per_qp_);
    // Rows of consecutive ids land in consecutive slots: one READ covers a run of them (up
    // to kMaxReadBytes), so a whole neighbor list or a block of rows costs one request.
    const int64_t max_run = std::max<int64_t>(1, kMaxReadBytes / row_bytes_);
    int64_t next = 0;
    while (next < n) {
      int64_t count = 0;
      while (count < chain && next < n) {
        int64_t run = 1;
        while (next + run < n && run < max_run && index[next + run] == index[next + run - 1] + 1) {
          ++run;
        }
        sges[count].addr = reinterpret_cast<uint64_t>(staging + (slot + next) * row_bytes_);
        sges[count].length = static_cast<uint32_t>(run * row_bytes_);
        sges[count].lkey = staging_mr_->lkey;
        std::memset(&wrs[count], 0, sizeof(wrs[count]));
        wrs[count].sg_list = &sges[count];
        wrs[count].num_sge = 1;
        wrs[count].opcode = IBV_WR_RDMA_READ;
        wrs[count].wr.rdma.remote_addr = peer.addr + static_cast<uint64_t>(index[next]) * row_bytes_;
        wrs[count].wr.rdma.rkey = peer.rkey;
        ++count;
        next += run;
      }
      const int64_t qp = peer.next_qp;
      peer.next_qp = (peer.next_qp + 1) % static_cast<int64_t>(peer.qps.size());
      for (int64_t k = 0; k < count; ++k) {
        wrs[k].wr_id = wr_id(peer_index, qp, k + 1 == count ? count : 0);
        wrs[k].send_flags = k + 1 == count ? IBV_SEND_SIGNALED : 0;
        wrs[k].next = k + 1 == count ? nullptr : &wrs[k + 1];
      }
      while (peer.in_flight[qp] + count > reads_per_qp_) poll_once(deadline);
      ibv_send_wr* bad = nullptr;
      const int posted = verbs::api().post_send(peer.qps[qp].get(), wrs, &bad);
      if (posted != 0) {
        fail("posting reads to host " + std::to_string(peer_index) + " failed (" +
             std::strerror(posted) + ")");
      }
      int64_t awaited = 0;
      for (const int64_t f : peer.in_flight) awaited += f;
      if (awaited == 0) peer.last_progress = Clock::now();
      peer.in_flight[qp] += count;
      outstanding_ += count;
    }
  }

  // Reaps completions until nothing is in flight, or raises at the deadline.
  void wait_for_reads(Clock::time_point deadline) {
    while (outstanding_ > 0) poll_once(deadline);
  }

  // Whether the served table still lies where it was registered. When it moved (its
  // storage swapped by share_memory_, resize_ or set_), peers keep reading the registered
  // memory: held, it is still the table's bytes (say so once); unheld, it may be freed, and
  // this transport stops.
  void check_served_memory() {
    if (served_address_ == nullptr || table_.storage().data() == served_address_) return;
    if (served_hold_) {
      TORCH_WARN_ONCE("quiver RDMA transport (host ", host_,
                      "): the table it serves moved in memory (share_memory_, resize_ or "
                      "set_) after it was registered; peers keep reading the registered "
                      "copy, held until the transport is closed, and in-place writes made "
                      "since do not reach them");
      return;
    }
    fail("the table it serves moved in memory after it was registered, and its old memory "
         "is not held: peers could read freed memory. Serve a table that stays where it "
         "is (in shared memory already, or mapped from a file)");
  }

  static std::string memlock_note() {
    rlimit limit{};
    if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "check `ulimit -l`";
    if (limit.rlim_cur == RLIM_INFINITY) return "locked memory is unlimited here";
    return "this process may lock " + std::to_string(limit.rlim_cur) +
           " bytes (RLIMIT_MEMLOCK): raise `ulimit -l` or Docker's --ulimit memlock";
  }

  static std::string peer_dtype_name(int32_t code) {
    if (code < 0 || code >= static_cast<int32_t>(c10::ScalarType::NumOptions)) {
      return "an unknown dtype (" + std::to_string(code) + ")";
    }
    return errors::dtype_name(static_cast<c10::ScalarType>(code));
  }

  void poll_once(Clock::time_point deadline) {
    ibv_wc wcs[32];
    const int got = verbs::api().poll_cq(cq_.get(), 32, wcs);
    if (got < 0) fail("polling the completion queue failed (it may have overflowed)");
    for (int k = 0; k < got; ++k) {
      const ibv_wc& wc = wcs[k];
      const auto peer = static_cast<int64_t>(wc.wr_id >> 48);
      const auto qp = static_cast<int64_t>((wc.wr_id >> 32) & 0xFFFF);
      const auto count = static_cast<int64_t>(wc.wr_id & 0xFFFFFFFF);
      if (wc.status != IBV_WC_SUCCESS) {
        fail("a read from host " + std::to_string(peer) +
             " failed: " + verbs::api().wc_status_str(wc.status) + " (status " +
             std::to_string(wc.status) + ", vendor error " + std::to_string(wc.vendor_err) + ")" +
             (wc.status == IBV_WC_RETRY_EXC_ERR
                  ? "; the peer did not answer: " + watch_->describe(watch_->period() * 3)
                  : ""));
      }
      if (peer >= 0 && peer < num_hosts_ &&
          qp < static_cast<int64_t>(peers_[peer].in_flight.size())) {
        peers_[peer].in_flight[qp] -= count;
        outstanding_ -= count;
        if (count > 0) peers_[peer].last_progress = Clock::now();
      }
    }
    if (got == 0 && interrupts_.interrupted()) {
      fail(Interrupted("reads from the other hosts").what());
    }
    if (got == 0) fail_if_read_peer_went_silent();
    if (got == 0 && Clock::now() > deadline) {
      std::ostringstream pending;
      const char* separator = "";
      for (int64_t h = 0; h < num_hosts_; ++h) {
        int64_t n = 0;
        for (int64_t f : peers_[h].in_flight) n += f;
        if (n) pending << separator << n << " from host " << h;
        if (n) separator = ", ";
      }
      fail("reads did not complete within " + std::to_string(options_.timeout_s) + " s (" +
           pending.str() + "): " + watch_->describe(watch_->period() * 3));
    }
  }

  // Reads to a dead peer may never complete (soft-RoCE answers neither them nor with an
  // error), so only the fetch's deadline had ended them: 61 s for a peer whose heartbeat had
  // been silent since 18 s (a probe). Once a period, a peer whose heartbeat has not moved
  // for three periods, and none of whose awaited reads has completed for as long, fails the
  // fetch, naming it: a live peer whose heartbeat stalled (paused, or its store calls
  // failing) still answers reads, and is not blamed; nor is any when the store or this
  // process's own watch stalled.
  void fail_if_read_peer_went_silent() {
    const auto now = Clock::now();
    if (now < next_silence_check_) return;
    next_silence_check_ = now + watch_->period();
    const auto patience = watch_->period() * 3;
    const PeerWatch::Silence silence = watch_->silent_peers(patience);
    if (!silence.store_reachable || silence.watch_stalled) return;
    for (const int h : silence.peers) {
      int64_t awaited = 0;
      for (const int64_t f : peers_[h].in_flight) awaited += f;
      if (awaited > 0 && now - peers_[h].last_progress > patience) {
        fail("reads from host " + std::to_string(h) + " are not completing (" +
             std::to_string(awaited) + " awaited): " + watch_->describe(watch_->period() * 3));
      }
    }
  }

  [[noreturn]] void fail(const std::string& why) {
    broken_ = why;
    TORCH_CHECK(false, "quiver RDMA transport (rdma:", device_name_, ", host ", host_, " of ", num_hosts_,
                "): ", why);
  }

  c10::intrusive_ptr<c10d::Store> store_;
  int64_t host_, num_hosts_;
  Transport::RdmaOptions options_;
  RdmaTestHooks hooks_;
  at::Tensor table_;
  std::chrono::milliseconds timeout_{0};
  InterruptWatch interrupts_;  // made anew for each fetch
  int64_t row_bytes_ = 0;
  // Keeps the registered memory allocated until the registration is gone (destroyed after
  // `served_`, declared before it).
  std::shared_ptr<void> served_hold_;
  const void* served_address_ = nullptr;
  uint8_t empty_byte_ = 0;
  std::string device_name_;
  int gid_index_ = 0;
  int64_t reads_per_qp_ = 0;
  int rd_atomic_ = 1;
  // Members are destroyed in reverse: queue pairs, then CQ and MRs, then PD and context.
  verbs::Context context_;
  verbs::Pd pd_;
  verbs::Mr served_;
  at::Tensor staging_;
  verbs::Mr staging_mr_;
  verbs::Cq cq_;
  std::vector<Peer> peers_;
  int64_t outstanding_ = 0;
  std::string broken_;
  std::unique_ptr<PeerWatch> watch_;
  Clock::time_point next_silence_check_{};
};

}  // namespace

c10::intrusive_ptr<Transport> rdma_with_test_hooks(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int64_t host, int64_t num_hosts,
                                                   at::Tensor table,
                                                   const Transport::RdmaOptions& options,
                                                   const RdmaTestHooks& hooks) {
  auto reader = std::make_unique<RdmaReader>(store, host, num_hosts, std::move(table), options,
                                             hooks);
  Transport::Parts parts;
  parts.kind = "rdma:" + reader->device_name();
  parts.store = store;
  parts.timeout = reader->timeout();
  parts.host = host;
  parts.num_hosts = num_hosts;
  parts.reader = std::move(reader);
  return c10::make_intrusive<Transport>(std::move(parts));
}

bool Transport::rdma_available() { return verbs::device_present(); }

std::vector<std::string> Transport::rdma_devices() { return verbs::device_names(); }

#else  // built without rdma-core's headers

c10::intrusive_ptr<Transport> rdma_with_test_hooks(const c10::intrusive_ptr<c10d::Store>&,
                                                   int64_t, int64_t, at::Tensor,
                                                   const Transport::RdmaOptions&,
                                                   const RdmaTestHooks&) {
  TORCH_CHECK(false,
              "torch-quiver-ops was built without rdma-core's verbs headers, so it has "
              "no RDMA transport: install libibverbs-dev and rebuild (QUIVER_WITH_RDMA=ON)");
}

bool Transport::rdma_available() { return false; }

std::vector<std::string> Transport::rdma_devices() { return {}; }

#endif

c10::intrusive_ptr<Transport> Transport::rdma(const c10::intrusive_ptr<c10d::Store>& store,
                                              int64_t host, int64_t num_hosts, at::Tensor table,
                                              const RdmaOptions& options) {
  return rdma_with_test_hooks(store, host, num_hosts, std::move(table), options, {});
}

c10::intrusive_ptr<Transport> Transport::rdma_over(
    const c10::intrusive_ptr<c10d::ProcessGroup>& group, at::Tensor table, std::string device,
    int64_t port, int64_t gid_index, int64_t qps_per_peer, int64_t staging_bytes,
    double timeout_s) {
  TORCH_CHECK_VALUE(group, "Transport.rdma needs a process group");
  RdmaOptions options;
  options.device = std::move(device);
  options.port = port;
  options.gid_index = gid_index;
  options.qps_per_peer = qps_per_peer;
  options.staging_bytes = staging_bytes;
  options.timeout_s = timeout_s;
  return rdma(group->getStore(), group->getRank(), group->getSize(), std::move(table), options);
}

}  // namespace quiver::runtime
