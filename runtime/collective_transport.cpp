// Transport::collective: rows exchanged with torch.distributed collectives over a c10d
// process group (one rank per host): NCCL between GPUs, Gloo on CPUs. A fetch is three
// all-to-alls: request counts (one int per peer), the requested local indices, and the
// rows, each peer's rows led by a header that carries the owner's verdict (how many of the
// requests it refused: ids outside its table). Owners check every requested index and
// serve a refused one as row 0, so that the exchange completes on every host before both
// sides raise; nothing is left waiting. The host waits twice per fetch: for the counts
// (they size the buffers) and, at the end, for the verdicts.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <quiver/transport.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "runtime/peer_watch.h"
#include "runtime/phase_clock.h"

namespace quiver::runtime {
namespace {

// Heartbeats run at this fraction of the timeout (at least every 100 ms), and a peer is
// called silent after this many periods without a beat.
constexpr double kBeatsPerTimeout = 10.0;
constexpr int kSilentPeriods = 3;

// Bytes of one row of a table shaped like `t` ([rows, *row_shape]).
int64_t row_bytes_of(const at::Tensor& t) {
  int64_t elements = 1;
  for (int64_t d = 1; d < t.dim(); ++d) elements *= t.size(d);
  return elements * static_cast<int64_t>(t.element_size());
}

// The same memory as rows of bytes (the last dimension widened by the element size).
at::Tensor as_bytes(const at::Tensor& rows) {
  return rows.dim() == 1 ? rows.view({-1, 1}).view(at::kByte) : rows.view(at::kByte);
}

class CollectiveTransport final : public Transport::Impl {
 public:
  CollectiveTransport(c10::intrusive_ptr<c10d::ProcessGroup> group, double timeout_s)
      : group_(std::move(group)),
        timeout_(static_cast<int64_t>(timeout_s * 1000)),
        host_(group_->getRank()),
        num_hosts_(group_->getSize()),
        uses_gpus_(group_->getBackendName() == "nccl") {
    TORCH_CHECK_VALUE(timeout_s > 0, "the transport's timeout must be > 0 seconds, got ",
                      timeout_s);
    // Every host makes its transports over a group in the same order, so the n-th one of
    // each shares its heartbeat keys (counted in the group's store).
    const int64_t serial =
        group_->getStore()->add("quiver/collective/made/" + std::to_string(host_), 1) - 1;
    const auto period = std::max(
        std::chrono::milliseconds(100),
        std::chrono::milliseconds(static_cast<int64_t>(timeout_.count() / kBeatsPerTimeout)));
    watch_ = std::make_unique<PeerWatch>(
        group_->getStore(), "quiver/heartbeat/" + std::to_string(serial) + "/",
        static_cast<int>(host_), static_cast<int>(num_hosts_), period);
  }

  std::vector<at::Tensor> fetch(const std::vector<at::Tensor>& requests,
                                const Transport::Serve& serve, int64_t served_rows,
                                const at::Tensor& like, const at::Device& device) override {
    TORCH_CHECK_VALUE(static_cast<int64_t>(requests.size()) == num_hosts_,
                      "fetch needs one request "
                      "per host (",
                      num_hosts_, "), got ", requests.size());
    const at::Device comm = uses_gpus_ ? device : at::Device(at::kCPU);
    TORCH_CHECK(!uses_gpus_ || device.is_cuda(),
                "an NCCL transport moves rows between GPUs, "
                "but the rows are wanted on ",
                device);
    const auto ids_options = at::TensorOptions(comm).dtype(at::kLong);

    PhaseClock clock("transport fetch");
    // 1. How many rows each host wants from each.
    std::vector<int64_t> send_counts(num_hosts_), recv_counts(num_hosts_);
    for (int64_t h = 0; h < num_hosts_; ++h) send_counts[h] = requests[h].numel();
    at::Tensor counts_out = at::tensor(send_counts, at::kLong).to(comm);
    at::Tensor counts_in = at::empty({num_hosts_}, ids_options);
    exchange(counts_in, counts_out, {}, {}, "request counts");
    const at::Tensor counts_host = counts_in.cpu();
    for (int64_t h = 0; h < num_hosts_; ++h) recv_counts[h] = counts_host[h].item<int64_t>();
    clock.lap("counts");

    // 2. The requested local indices.
    std::vector<at::Tensor> parts;
    for (const at::Tensor& r : requests) parts.push_back(r.to(comm, at::kLong));
    at::Tensor ids_out = at::cat(parts);
    int64_t asked = 0;
    for (int64_t c : recv_counts) asked += c;
    at::Tensor ids_in = at::empty({asked}, ids_options);
    exchange(ids_in, ids_out, recv_counts, send_counts, "requested rows");
    clock.lap("ids");

    // 3. Check every request against this host's table; refused ones read row 0. The
    // count of refusals per peer stays on the device until the end of the fetch.
    const at::Tensor bad = (ids_in < 0) | (ids_in >= served_rows);
    std::vector<at::Tensor> refused_per_peer;
    for (int64_t h = 0, begin = 0; h < num_hosts_; ++h) {
      refused_per_peer.push_back(bad.narrow(0, begin, recv_counts[h]).sum(at::kLong));
      begin += recv_counts[h];
    }
    const at::Tensor refused_here = at::stack(refused_per_peer);

    // 4. The rows, as bytes (every backend moves uint8, whatever the table's dtype), each
    // peer's led by `header_rows` rows whose first 8 bytes carry its verdict. One gather
    // serves the header slots too (as row 0), so the rows go out without another copy.
    const int64_t row_bytes = row_bytes_of(like);
    const int64_t header_rows = (8 + row_bytes - 1) / std::max<int64_t>(row_bytes, 1);
    std::vector<int64_t> send_rows(num_hosts_), recv_rows(num_hosts_);
    std::vector<at::Tensor> serve_parts;
    const at::Tensor header_ids = at::zeros({header_rows}, ids_options);
    const at::Tensor safe_ids = at::where(bad, 0, ids_in);
    int64_t wanted = 0;
    for (int64_t h = 0, begin = 0; h < num_hosts_; ++h) {
      recv_rows[h] = send_counts[h] + header_rows;  // what this host receives from h
      send_rows[h] = recv_counts[h] + header_rows;  // what it sends h
      wanted += recv_rows[h];
      serve_parts.push_back(header_ids);
      serve_parts.push_back(safe_ids.narrow(0, begin, recv_counts[h]));
      begin += recv_counts[h];
    }
    const auto byte_options = at::TensorOptions(comm).dtype(at::kByte);
    at::Tensor bytes_out;
    if (served_rows > 0) {
      bytes_out = as_bytes(serve(at::cat(serve_parts)).to(comm).contiguous());
      bytes_out = bytes_out.view({bytes_out.size(0), row_bytes});
    } else {  // an empty table has no row 0 to serve: headers only (any request is refused)
      bytes_out = at::zeros({at::cat(serve_parts).numel(), row_bytes}, byte_options);
    }
    for (int64_t h = 0, at_row = 0; h < num_hosts_; ++h) {
      bytes_out.narrow(0, at_row, header_rows).view(-1).narrow(0, 0, 8).copy_(
          refused_here.narrow(0, h, 1).view(at::kByte));
      at_row += send_rows[h];
    }
    at::Tensor bytes_in;
    if (comm.is_cpu()) {
      // One receive buffer, kept and grown: a fresh host buffer per fetch pays its page
      // faults inside the backend's receive path (measured: 90 ms against 16 ms for 32 MB
      // through Gloo). The rows handed back view it until the next fetch.
      const int64_t bytes = wanted * row_bytes;
      if (!host_receive_.defined() || host_receive_.numel() < bytes) {
        host_receive_ = at::empty({std::max<int64_t>(bytes, 1)},
                                  at::TensorOptions(at::kByte).pinned_memory(at::hasCUDA()));
      }
      bytes_in = host_receive_.narrow(0, 0, bytes).view({wanted, row_bytes});
    } else {
      bytes_in = at::empty({wanted, row_bytes}, byte_options);
    }
    clock.lap("serve");
    exchange(bytes_in, bytes_out, recv_rows, send_rows, "rows");
    clock.lap("rows");

    // The verdicts: what each peer refused this host, and what this host refused each peer,
    // read back in one wait.
    std::vector<at::Tensor> verdict_parts;
    for (int64_t h = 0, at_row = 0; h < num_hosts_; ++h) {
      verdict_parts.push_back(bytes_in.narrow(0, at_row, header_rows).reshape(-1).narrow(0, 0, 8));
      at_row += recv_rows[h];
    }
    const at::Tensor verdicts =
        at::cat({at::cat(verdict_parts).view(at::kLong), refused_here}).cpu();
    const int64_t* verdict = verdicts.const_data_ptr<int64_t>();
    for (int64_t h = 0; h < num_hosts_; ++h) {
      TORCH_CHECK_VALUE(verdict[h] == 0, "host ", h, " refused ", verdict[h], " of the ",
                        send_counts[h], " rows this host (", host_,
                        ") asked for: they lie outside its table. "
                        "The hosts hold different shard maps or tables");
      TORCH_CHECK_VALUE(verdict[num_hosts_ + h] == 0, "host ", h, " asked this host (", host_,
                        ") for ", verdict[num_hosts_ + h], " rows outside its table of ",
                        served_rows, " rows. The hosts hold different shard maps or tables");
    }
    std::vector<int64_t> row_shape = like.sizes().vec();
    std::vector<at::Tensor> out;
    for (int64_t h = 0, at_row = 0; h < num_hosts_; ++h) {
      row_shape[0] = send_counts[h];
      out.push_back(bytes_in.narrow(0, at_row + header_rows, send_counts[h])
                        .view(like.scalar_type())
                        .view(row_shape)
                        .to(device));
      at_row += recv_rows[h];
    }
    return out;
  }

  ~CollectiveTransport() override {
    watch_.reset();
    // The last reference to a process group may be this one, dropped from Python with the
    // GIL held (at interpreter exit, say), while a backend thread of the group waits for the
    // GIL to finish a callback: destroying the group here would wait for that thread
    // forever. A thread of its own destroys it, as torch's own bindings do without the GIL.
    std::thread([group = std::move(group_)]() mutable { group.reset(); }).detach();
  }

  std::string kind() const override { return "collective:" + group_->getBackendName(); }
  int64_t host() const override { return host_; }
  int64_t num_hosts() const override { return num_hosts_; }
  bool collective() const override { return true; }

 private:
  // One all-to-all, waited for at most the timeout; a failure names the silent peers. The
  // wait polls the work (a CUDA event query for NCCL) instead of wait(timeout), which for
  // NCCL sleeps a millisecond at a time: four of those per fetch cost more than the rows.
  void exchange(at::Tensor& into, at::Tensor& from, std::vector<int64_t> into_splits,
                std::vector<int64_t> from_splits, const char* what) {
    c10d::AllToAllOptions options;
    options.timeout = timeout_;
    try {
      auto work = group_->alltoall_base(into, from, into_splits, from_splits, options);
      if (!uses_gpus_) {
        work->wait(timeout_);  // Gloo blocks on a condition variable: nothing to spin
        return;
      }
      const auto deadline = std::chrono::steady_clock::now() + timeout_;
      while (!work->isCompleted()) {
        if (std::chrono::steady_clock::now() > deadline) {
          throw std::runtime_error("no answer within " + std::to_string(timeout_.count()) + " ms");
        }
        std::this_thread::yield();
      }
      work->wait();  // raises the collective's own error, orders the current stream after it
    } catch (const std::exception& error) {
      const auto patience = watch_->period() * kSilentPeriods;
      TORCH_CHECK(false, "quiver transport (", kind(), ", host ", host_, " of ", num_hosts_,
                  "): exchanging ", what, " failed: ", watch_->describe(patience),
                  ". The collective said: ", error.what());
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::chrono::milliseconds timeout_;
  int64_t host_;
  int64_t num_hosts_;
  bool uses_gpus_;
  std::unique_ptr<PeerWatch> watch_;
  at::Tensor host_receive_;  // kept across fetches (see fetch)
};

}  // namespace

Transport::Transport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

c10::intrusive_ptr<Transport> Transport::collective(
    const c10::intrusive_ptr<c10d::ProcessGroup>& group, double timeout_s) {
  TORCH_CHECK_VALUE(group, "Transport.collective needs a process group");
  return c10::make_intrusive<Transport>(std::make_unique<CollectiveTransport>(group, timeout_s));
}

}  // namespace quiver::runtime
