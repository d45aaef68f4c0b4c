// Transport::collective: rows exchanged with torch.distributed collectives over a c10d
// process group (one rank per host): NCCL between GPUs, Gloo on CPUs.
//
// fetch (every backend) is three all-to-alls: request counts (with the caller's tag and
// row size, so that fetches that do not pair are refused by every host before any row
// moves), the requested local indices, and the rows, each peer's rows led by a header that
// carries the owner's verdict (how many of the requests it refused: ids outside its table). Owners
// check every requested index and serve a refused one as row 0, so that the exchange
// completes on every host before both sides raise; nothing is left waiting. Every exchange
// is waited for on the host, within the timeout (a stream that waited on a dead peer would
// hang the next synchronization).
//
// fetch_slotted (NCCL) drops the counts: requests and rows travel in fixed per-peer slots
// (runtime/cuda/owner_slots.h), the owner checks and serves on the stream between the two
// exchanges, and the host waits once, polling the rows' exchange within the timeout. At
// 45 MB a fetch the host's work, not the bytes, sets the pace (docs/benchmarks.md): one wait
// instead of four took two H200s from 38 to 90-109 GB/s. The two exchanges go through a
// communicator of the transport's own (runtime/nccl_direct.h) rather than c10d's
// all-to-all, whose posts cost 50-120 us each: 102-119 GB/s in 9 of 11 rounds, against
// 53-115 through c10d in the same runs.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <quiver/transport.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "ops/checks.h"
#ifdef QUIVER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "runtime/cuda/owner_slots.h"
#include "runtime/nccl_direct.h"
#endif
#include "runtime/collective_wait.h"
#include "runtime/host_agreement.h"
#include "runtime/kept_buffer.h"
#include "runtime/lane_exchange.h"
#include "runtime/peer_watch.h"
#include "runtime/phase_clock.h"

namespace quiver::runtime {
namespace {

// The two faults a fetch's verdicts report, one sentence each for every path: a peer refused
// rows this host asked for, or asked this host for rows outside its table.
void check_peer_served(int64_t peer, int64_t refused, int64_t asked, int64_t me) {
  TORCH_CHECK_VALUE(refused == 0, "host ", peer, " refused ", refused, " of the ", asked,
                    " rows this host (", me, ") asked for: they lie outside its table. ",
                    "The hosts hold different shard maps or tables");
}

void check_peer_asked_within(int64_t peer, int64_t outside, int64_t me, int64_t served_rows) {
  TORCH_CHECK_VALUE(outside == 0, "host ", peer, " asked this host (", me, ") for ", outside,
                    " rows outside its table of ", served_rows,
                    " rows. The hosts hold different shard maps or tables");
}

// Heartbeats run at this fraction of the timeout (at least every 100 ms), and a peer is
// called silent after this many periods without a beat.
constexpr double kBeatsPerTimeout = 10.0;
constexpr int kSilentPeriods = 3;
// The words each host sends each host before a fetch: rows asked for, the caller's tag,
// the row size. And the most rows a peer may ask for in one fetch: a larger count is a
// faulty peer, refused before it sizes any buffer.
constexpr int64_t kCountWords = 3;
constexpr int64_t kMostRowsAsked = int64_t{1} << 40;

// a * b, or a ValueError naming `what` when it overflows int64.
int64_t checked_product(int64_t a, int64_t b, const char* what) {
  int64_t product = 0;
  TORCH_CHECK_VALUE(!__builtin_mul_overflow(a, b, &product), what, ": ", a, " x ", b,
                    " overflows");
  return product;
}

// The same memory as rows of bytes (the last dimension widened by the element size).
at::Tensor as_bytes(const at::Tensor& rows) {
  return rows.dim() == 1 ? rows.view({-1, 1}).view(at::kByte) : rows.view(at::kByte);
}

// Rows of `row_bytes` that lead each host's block of answered rows, enough for the owner's
// 8-byte verdict (both fetches' wire format).
int64_t verdict_rows(int64_t row_bytes) {
  return (8 + row_bytes - 1) / std::max<int64_t>(row_bytes, 1);
}

class CollectiveTransport final : public Transport::Impl {
 public:
  CollectiveTransport(c10::intrusive_ptr<c10d::ProcessGroup> group, double timeout_s,
                      std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> lanes)
      : group_(std::move(group)),
        lanes_(std::move(lanes)),
        timeout_(checked_timeout(timeout_s, "the transport's timeout")),
        host_(group_->getRank()),
        num_hosts_(group_->getSize()),
        uses_gpus_(group_->getBackendName() == "nccl") {
    check_lanes(lanes_, *group_, "Transport.collective");
    // Every host makes its transports over a group in the same order, so the n-th one of
    // each shares its heartbeat keys (counted in the group's store).
    serial_ = group_->getStore()->add("quiver/collective/made/" + std::to_string(host_), 1) - 1;
    const auto period = std::max(
        std::chrono::milliseconds(100),
        std::chrono::milliseconds(static_cast<int64_t>(timeout_.count() / kBeatsPerTimeout)));
    watch_ = std::make_unique<PeerWatch>(
        group_->getStore(), "quiver/heartbeat/" + std::to_string(serial_) + "/",
        static_cast<int>(host_), static_cast<int>(num_hosts_), period);
  }

  std::vector<at::Tensor> fetch(const std::vector<at::Tensor>& requests,
                                const Transport::Serve& serve, int64_t served_rows,
                                const at::Tensor& like, const at::Device& device,
                                const Transport::Arrived& arrived, int64_t tag) override {
    check_not_broken();
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
    // Each peer's part of a message leads with `header_rows` slots: in the requested
    // indices they are placeholders (index 0) that the one gather on the owner fills, and in
    // the rows the owner writes its verdict into their first 8 bytes. So the rows go out
    // without another copy, and the verdicts without another exchange.
    const int64_t row_bytes = row_bytes_of(like);
    const int64_t header_rows = verdict_rows(row_bytes);

    // 1. How many rows each host wants from each, for which table, in rows of which size.
    std::vector<int64_t> send_counts(num_hosts_), recv_counts(num_hosts_);
    std::vector<int64_t> counts_words(kCountWords * num_hosts_);
    for (int64_t h = 0; h < num_hosts_; ++h) {
      send_counts[h] = requests[h].numel();
      counts_words[kCountWords * h] = send_counts[h];
      counts_words[kCountWords * h + 1] = tag;
      counts_words[kCountWords * h + 2] = row_bytes;
    }
    at::Tensor counts_out = at::tensor(counts_words, at::kLong).to(comm);
    at::Tensor counts_in = at::empty({kCountWords * num_hosts_}, ids_options);
    exchange(counts_in, counts_out, {}, {}, "request counts");
    const at::Tensor counts_host = counts_in.cpu();
    const int64_t* count_in = counts_host.const_data_ptr<int64_t>();
    // Every host checks every peer's words before anything else moves: a fetch that does
    // not pair raises on both sides of it, and the hosts stay in step.
    for (int64_t h = 0; h < num_hosts_; ++h) {
      const int64_t* words = count_in + kCountWords * h;
      TORCH_CHECK_VALUE(words[1] == tag && words[2] == row_bytes, "quiver transport (",
                        kind(), ", host ", host_, "): host ", h, " fetched rows of ", words[2],
                        " bytes for table ", words[1], " while this host fetched rows of ",
                        row_bytes, " bytes for table ", tag,
                        ". Over a collective transport every host must gather the same "
                        "tables in the same order (two tables gathered by two threads over "
                        "one transport cannot be paired: give each its own transport)");
      recv_counts[h] = words[0];
      if (recv_counts[h] < 0 || recv_counts[h] > kMostRowsAsked) {
        fail("request counts", std::runtime_error("host " + std::to_string(h) + " asked for " +
                                                  std::to_string(recv_counts[h]) + " rows"));
      }
    }
    clock.lap("counts");

    // 2. The requested local indices, each peer's behind its header slots.
    std::vector<int64_t> send_ids(num_hosts_), recv_ids(num_hosts_);
    std::vector<at::Tensor> parts;
    if (!header_ids_.defined() || header_ids_.device() != comm ||
        header_ids_.numel() != header_rows) {
      header_ids_ = at::zeros({header_rows}, ids_options);
    }
    const at::Tensor header_ids = header_ids_;
    int64_t asked = 0;
    for (int64_t h = 0; h < num_hosts_; ++h) {
      parts.push_back(header_ids);
      parts.push_back(requests[h].to(comm, at::kLong));
      send_ids[h] = send_counts[h] + header_rows;
      recv_ids[h] = recv_counts[h] + header_rows;
      asked += recv_ids[h];
    }
    at::Tensor ids_out = at::cat(parts);
    at::Tensor ids_in = at::empty({asked}, ids_options);
    exchange(ids_in, ids_out, recv_ids, send_ids, "requested rows");
    clock.lap("ids");

    // 3. Check every request against this host's table: refused ones read row 0, and the
    // count of refusals per peer stays on the device until the end of the fetch.
    at::Tensor refused_here = at::zeros({num_hosts_}, ids_options);
    const auto byte_options = at::TensorOptions(comm).dtype(at::kByte);
    at::Tensor safe_ids;
    if (served_rows > 0) {
      safe_ids = ids_in.clamp(0, served_rows - 1);
      const at::Tensor refused = ids_in.ne(safe_ids);
      for (int64_t h = 0, begin = 0; h < num_hosts_; ++h) {
        if (recv_counts[h] > 0) {
          at::Tensor slot = refused_here.select(0, h);
          at::sum_out(slot, refused.narrow(0, begin + header_rows, recv_counts[h]), {0});
        }
        begin += recv_ids[h];
      }
    } else {  // an empty table has no row 0 to serve: every request refused
      refused_here.copy_(counts_in.view({num_hosts_, kCountWords}).select(1, 0));
    }
    // 4. The rows: a buffer to receive them in, then what this host serves.
    int64_t wanted = 0;
    std::vector<int64_t> answer_at(num_hosts_);  // where host h's answer starts in bytes_in
    for (int64_t h = 0; h < num_hosts_; ++h) {
      answer_at[h] = wanted;
      wanted += send_ids[h];
    }
    at::Tensor bytes_in, bytes_out;
    if (comm.is_cpu()) {
      // Buffers kept and grown: a fresh host buffer per fetch pays its page faults inside
      // the backend's receive path (measured: 90 ms against 16 ms for 32 MB through Gloo).
      // The rows handed back view the receive buffer until the next fetch.
      bytes_in = kept_bytes(host_receive_, wanted, row_bytes, /*pinned=*/true);
      bytes_out = kept_bytes(host_send_, asked, row_bytes, /*pinned=*/false);
    } else {
      bytes_in = at::empty({wanted, row_bytes}, byte_options);
    }
    const auto typed = [&](const at::Tensor& bytes) {
      return bytes.view(like.scalar_type()).view(rows_like(like, bytes.size(0)));
    };
    // The rows, as bytes (every backend moves uint8, whatever the table's dtype). One
    // gather serves the header slots too (as row 0), so the rows go out without another
    // copy: on the CPU straight into the kept send buffer. (Serving each lane's part just
    // before sending it, to overlap the two, measured slower in two runs on the two-H200
    // host: the gather's threads and the connections' threads compete for the cores.)
    if (served_rows == 0) {  // an empty table has no row 0 to serve: every request refused
      bytes_out = comm.is_cpu() ? bytes_out.zero_() : at::zeros({asked, row_bytes}, byte_options);
    } else if (comm.is_cpu()) {
      const at::Tensor into = typed(bytes_out);
      const at::Tensor rows = serve(safe_ids, into);
      if (!rows.is_same(into)) into.copy_(rows);
    } else {
      bytes_out =
          as_bytes(serve(safe_ids, at::Tensor()).to(comm).contiguous()).view({asked, row_bytes});
    }
    // Then each peer that asked for rows gets its verdict in its header's first 8 bytes.
    for (int64_t h = 0, at_row = 0; h < num_hosts_; ++h) {
      if (recv_counts[h] > 0) {
        bytes_out.narrow(0, at_row, header_rows)
            .view(-1)
            .narrow(0, 0, 8)
            .copy_(refused_here.narrow(0, h, 1).view(at::kByte));
      }
      at_row += recv_ids[h];
    }
    clock.lap("serve");
    // Host h's rows [begin, end) of its answer (its header rows first) are in bytes_in.
    const bool handed_by_lane = arrived && !lanes_.empty();
    const auto landed = [&](int64_t h, int64_t begin, int64_t end) {
      begin = std::max(begin, header_rows);
      if (end > begin) {
        arrived(h, begin - header_rows,
                typed(bytes_in.narrow(0, answer_at[h] + begin, end - begin)));
      }
    };
    if (lanes_.empty()) {
      exchange(bytes_in, bytes_out, send_ids, recv_ids, "rows");
      clock.lap("rows");
    } else {
      // (Handing each part over as it lands measured no faster than placing everything after
      // the last lane on the two-H200 host, 16 cores a process: 2.79-2.89 against 2.64-2.88
      // GB/s; the placement's threads and the connections' compete for the cores, as serving
      // lane by lane did.)
      exchange_over_lanes(lanes_, host_, bytes_in, bytes_out, send_ids, recv_ids, header_rows,
                          timeout_, handed_by_lane ? LaneLanded(landed) : LaneLanded(),
                          [&](const std::exception& error) {
                            fail(("rows over " + std::to_string(lanes_.size()) + " lanes").c_str(),
                                 error);
                          });
      clock.lap("rows over lanes");
    }

    // The verdicts: what each peer refused this host, and what this host refused each peer,
    // read back in one copy.
    std::vector<at::Tensor> verdict_parts;
    for (int64_t h = 0; h < num_hosts_; ++h) {
      if (send_counts[h] > 0) {
        verdict_parts.push_back(
            bytes_in.narrow(0, answer_at[h], header_rows).reshape(-1).narrow(0, 0, 8));
      }
    }
    verdict_parts.push_back(refused_here.view(at::kByte));
    const at::Tensor verdicts = at::cat(verdict_parts).cpu().view(at::kLong);
    const int64_t* verdict = verdicts.const_data_ptr<int64_t>();
    for (int64_t h = 0; h < num_hosts_; ++h) {
      if (send_counts[h] == 0) continue;
      check_peer_served(h, *verdict, send_counts[h], host_);
      ++verdict;
    }
    for (int64_t h = 0; h < num_hosts_; ++h) {
      check_peer_asked_within(h, verdict[h], host_, served_rows);
    }
    if (arrived) {
      if (!handed_by_lane) {
        for (int64_t h = 0; h < num_hosts_; ++h) landed(h, 0, send_ids[h]);
      }
      return {};
    }
    std::vector<at::Tensor> out;
    for (int64_t h = 0; h < num_hosts_; ++h) {
      out.push_back(
          typed(bytes_in.narrow(0, answer_at[h] + header_rows, send_counts[h])).to(device));
    }
    return out;
  }

  c10::intrusive_ptr<c10d::Store> store() const override { return group_->getStore(); }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  ~CollectiveTransport() override {
#ifdef QUIVER_WITH_CUDA
    direct_.reset();
    for (cudaEvent_t event : {exchanged_, rows_served_, rows_arrived_}) {
      if (event != nullptr) cudaEventDestroy(event);
    }
#endif
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

  std::string kind() const override { return "collective:" + group_->getBackendName(); }
  int64_t host() const override { return host_; }
  int64_t num_hosts() const override { return num_hosts_; }
  bool collective() const override { return true; }

#ifdef QUIVER_WITH_CUDA
  // The slotted fetch (transport.h): two all-to-alls of fixed blocks, the requests and the
  // rows; between them the owner checks and serves on the stream without the host waiting,
  // and the host waits once, for the rows. The capacity follows the largest request any
  // host made: every host reads every host's largest in the requests' headers, so all
  // grow (or shrink) it alike, and all know when a fetch overflowed it.
  bool slotted() const override { return uses_gpus_; }

  SlotLayout slot_layout(int64_t row_bytes) const override {
    return {capacity_, verdict_rows(row_bytes)};
  }

  SlottedRows fetch_slotted(const at::Tensor& requests, const Transport::Serve& serve,
                            bool serve_waits, int64_t served_rows, int64_t row_bytes,
                            const at::Tensor& extra,
                            const std::function<void()>& meanwhile) override {
    check_not_broken();
    TORCH_CHECK(uses_gpus_, "the slotted fetch is for NCCL transports");
    const SlotLayout layout = slot_layout(row_bytes);
    const int64_t peers = num_hosts_ - 1, capacity = layout.capacity, header = layout.row_header;
    TORCH_CHECK(requests.is_cuda() && requests.scalar_type() == at::kLong && requests.dim() == 2 &&
                    requests.size(0) == peers && requests.size(1) == cuda::kSlotHeader + capacity,
                "fetch_slotted: requests must be int64 [", peers, ", ",
                cuda::kSlotHeader + capacity, "] on a GPU, got ", requests.scalar_type(), " ",
                requests.sizes(), " on ", requests.device());
    const at::Device device = requests.device();
    const c10::cuda::CUDAGuard guard(device);
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device.index()).stream();
    const auto long_options = requests.options();
    PhaseClock clock("slotted fetch");
    // A block per peer and none for this host: the split sizes are known to every host
    // without an exchange.
    const auto splits = [&](int64_t per_peer) {
      std::vector<int64_t> sizes(num_hosts_, per_peer);
      sizes[host_] = 0;
      return sizes;
    };

    // The int64 words of a fetch in one allocation: requests received, the checked indices
    // served, refusals (zeroed) and the summary read back.
    const int64_t block_rows = header + capacity;
    const int64_t request_words = requests.numel(), safe_words = peers * block_rows;
    const int64_t extra_words = extra.defined() ? extra.numel() : 0;
    const int64_t summary_words = 5 * peers + 1 + extra_words;
    at::Tensor words =
        at::empty({request_words + safe_words + peers + summary_words}, long_options);
    at::Tensor sent = requests.view(-1);
    at::Tensor asked = words.narrow(0, 0, request_words);
    at::Tensor safe = words.narrow(0, request_words, safe_words);
    at::Tensor refused = words.narrow(0, request_words + safe_words, peers);
    at::Tensor summary = words.narrow(0, request_words + safe_words + peers, summary_words);
    C10_CUDA_CHECK(cudaMemsetAsync(refused.mutable_data_ptr(), 0, peers * sizeof(int64_t), stream));
    NcclDirect* direct = peers > 0 ? direct_on(device) : nullptr;
    if (peers > 0) {
      const int64_t request_block = cuda::kSlotHeader + capacity;
      if (direct != nullptr) {
        exchange_directly(sent, asked, request_block * sizeof(int64_t), stream, "requested rows");
        if (serve_waits) wait_directly(stream, "requested rows");
      } else {
        // Waited for on the host, within the timeout: through c10d, a stream made to wait
        // on a collective that never completes would stay blocked behind it.
        const auto asked_work =
            post(asked, sent, splits(request_block), splits(request_block), "requested rows");
        await(asked_work, "requested rows");
      }
    }
    clock.lap("ids");

    C10_CUDA_CHECK(cuda::check_slot_requests(asked.const_data_ptr<int64_t>(), peers, capacity,
                                             header, served_rows, safe.mutable_data_ptr<int64_t>(),
                                             refused.mutable_data_ptr<int64_t>(), stream));
    at::Tensor rows_out;
    if (served_rows > 0 && peers > 0) {
      rows_out = as_bytes(serve(safe, at::Tensor()).to(device).contiguous())
                     .view({peers * block_rows, row_bytes});
    } else {  // an empty table has no row 0 to serve: every request refused
      rows_out = at::zeros({peers * block_rows, row_bytes}, long_options.dtype(at::kByte));
    }
    const int64_t block_bytes = block_rows * row_bytes;
    C10_CUDA_CHECK(cuda::write_slot_verdicts(static_cast<char*>(rows_out.mutable_data_ptr()), peers,
                                             block_bytes, refused.const_data_ptr<int64_t>(),
                                             stream));
    clock.lap("serve");
    at::Tensor rows_in = at::empty_like(rows_out);
    c10::intrusive_ptr<c10d::Work> rows_work;
    if (direct != nullptr) {
      // On a side stream, so that what `meanwhile` enqueues on this one runs beside the
      // rows' exchange (as beside c10d's, which runs on its own stream); this stream then
      // waits for the rows.
      const cudaStream_t side = direct_side_->stream();
      C10_CUDA_CHECK(cudaEventRecord(rows_served_, stream));
      C10_CUDA_CHECK(cudaStreamWaitEvent(side, rows_served_, 0));
      exchange_directly(rows_out, rows_in, block_bytes, side, "rows");
      C10_CUDA_CHECK(cudaEventRecord(rows_arrived_, side));
      if (meanwhile) meanwhile();
      C10_CUDA_CHECK(cudaStreamWaitEvent(stream, rows_arrived_, 0));
    } else {
      if (peers > 0) {
        rows_work = post(rows_in, rows_out, splits(block_rows), splits(block_rows), "rows");
      }
      if (meanwhile) meanwhile();
      if (rows_work) await(rows_work, "rows");
    }
    clock.lap("rows");

    C10_CUDA_CHECK(cuda::summarize_slot_fetch(
        sent.const_data_ptr<int64_t>(), asked.const_data_ptr<int64_t>(), peers, capacity,
        refused.const_data_ptr<int64_t>(), static_cast<const char*>(rows_in.const_data_ptr()),
        block_bytes, extra_words ? extra.const_data_ptr<int64_t>() : nullptr, extra_words,
        summary.mutable_data_ptr<int64_t>(), stream));
    // Read back into pinned memory this transport keeps: a plain copy, then one wait.
    if (!summary_host_.defined() || summary_host_.numel() < summary_words) {
      summary_host_ = at::empty({summary_words}, at::TensorOptions(at::kLong).pinned_memory(true));
    }
    C10_CUDA_CHECK(cudaMemcpyAsync(summary_host_.mutable_data_ptr(), summary.const_data_ptr(),
                                   summary_words * sizeof(int64_t), cudaMemcpyDeviceToHost,
                                   stream));
    if (direct != nullptr) {
      wait_directly(stream, "rows");  // the one wait, for rows and summary alike
    } else {
      C10_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    clock.lap(direct != nullptr ? "rows and summary" : "summary");
    const int64_t* word = summary_host_.const_data_ptr<int64_t>();
    const int64_t* asked_of = word;             // rows this host asked of peer p
    // (word + peers: rows p asked of this host)
    const int64_t* largest = word + 2 * peers;  // the most p asked of any host
    const int64_t* refused_here = word + 3 * peers;
    const int64_t* refused_there = word + 4 * peers;
    const auto host_of_peer = [&](int64_t p) { return p + (p >= host_); };
    // Every host reads the same largest requests, so all decide alike here, before any
    // raises: whether the fetch is complete, and the next capacity. A host that raised
    // before this (or skipped the retry of an incomplete fetch) would leave the others
    // exchanging blocks of another size.
    const int64_t most = std::max(word[5 * peers], *std::max_element(largest, largest + peers));
    if (most < 0 || most > kMostRowsAsked) {
      fail("slot requests", std::runtime_error("a host asked for " + std::to_string(most) +
                                               " rows of one host"));
    }
    SlottedRows result;
    result.rows = rows_in;
    result.complete = most <= capacity;
    // Grown past the largest request, with room for the next batches' spread; shrunk only
    // when far too large, so that it does not swing from batch to batch.
    if (!result.complete || 2 * most + 256 < capacity) {
      constexpr int64_t kGrain = 256;
      capacity_ = (most + most / 16 + kGrain) / kGrain * kGrain;
    }
    if (result.complete) {  // else every host fetches again, and raises then
      for (int64_t p = 0; p < peers; ++p) {
        check_peer_served(host_of_peer(p), refused_there[p], asked_of[p], host_);
      }
      for (int64_t p = 0; p < peers; ++p) {
        check_peer_asked_within(host_of_peer(p), refused_here[p], host_, served_rows);
      }
    }
    result.extra.assign(word + 5 * peers + 1, word + 5 * peers + 1 + extra_words);
    clock.lap("verdicts");
    return result;
  }
#endif

 private:
#ifdef QUIVER_WITH_CUDA
  // The communicator of this transport's own (runtime/nccl_direct.h), made at the first
  // slotted fetch, which every host reaches together; null when some host cannot drive
  // NCCL directly, and the fetch then goes through c10d.
  NcclDirect* direct_on(const at::Device& device) {
    if (!direct_decided_) {
      // Decided once: after a failed set-up the hosts are out of step, and this transport
      // raises from then on rather than try again.
      direct_decided_ = true;
      std::string why_not;
      try {
        direct_ =
            NcclDirect::connect(*group_->getStore(), "quiver/nccl/" + std::to_string(serial_) + "/",
                                static_cast<int>(host_), static_cast<int>(num_hosts_),
                                device.index(), timeout_, why_not);
      } catch (const std::exception& error) {
        set_up_failed_ = true;
        fail("the NCCL communicator's set-up", error);
      }
      if (!direct_ && tracing_transport()) {
        std::fprintf(stderr, "quiver transport: NCCL through c10d (%s)\n", why_not.c_str());
      }
      if (direct_) {
        for (cudaEvent_t* event : {&exchanged_, &rows_served_, &rows_arrived_}) {
          C10_CUDA_CHECK(cudaEventCreateWithFlags(event, cudaEventDisableTiming));
        }
        direct_side_ = at::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index());
      }
    }
    TORCH_CHECK(!set_up_failed_, "quiver transport (", kind(), ", host ", host_,
                "): its NCCL communicator's set-up failed in an earlier fetch");
    if (!direct_) return nullptr;
    TORCH_CHECK(direct_->device() == device.index(), "this transport's NCCL communicator is on ",
                "cuda:", direct_->device(), ", but the rows are wanted on ", device);
    return direct_.get();
  }

  void exchange_directly(const at::Tensor& from, const at::Tensor& into, int64_t block_bytes,
                         cudaStream_t stream, const char* what) {
    try {
      direct_->exchange_blocks(from.const_data_ptr(), into.data_ptr(),
                               static_cast<size_t>(block_bytes), stream);
    } catch (const std::exception& error) {
      fail(what, error);
    }
  }

  // Waits for everything enqueued on `stream` so far, within the timeout.
  void wait_directly(cudaStream_t stream, const char* what) {
    try {
      C10_CUDA_CHECK(cudaEventRecord(exchanged_, stream));
      direct_->wait(exchanged_, timeout_);
    } catch (const std::exception& error) {
      fail(what, error);
    }
  }
#endif

  // One all-to-all, waited for at most the timeout; a failure names the silent peers.
  void exchange(at::Tensor& into, at::Tensor& from, std::vector<int64_t> into_splits,
                std::vector<int64_t> from_splits, const char* what) {
    await(post(into, from, std::move(into_splits), std::move(from_splits), what), what);
  }

  // Starts one all-to-all (empty splits: equal blocks per host).
  c10::intrusive_ptr<c10d::Work> post(at::Tensor& into, at::Tensor& from,
                                      std::vector<int64_t> into_splits,
                                      std::vector<int64_t> from_splits, const char* what) {
    c10d::AllToAllOptions options;
    options.timeout = timeout_;
    try {
      return group_->alltoall_base(into, from, into_splits, from_splits, options);
    } catch (const std::exception& error) {
      fail(what, error);
    }
  }

  // Waits for a posted exchange, at most the timeout (runtime/collective_wait.h).
  void await(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
    try {
      await_within(work, timeout_, /*poll=*/uses_gpus_);
    } catch (const std::exception& error) {
      fail(what, error);
    }
  }

  // An exchange failed: the hosts may be out of step, so this transport serves no more
  // fetches (each would pair with whatever its peers do next).
  [[noreturn]] void fail(const char* what, const std::exception& error) {
    const auto patience = watch_->period() * kSilentPeriods;
    std::ostringstream why;
    why << "exchanging " << what << " failed: " << watch_->describe(patience)
        << ". The collective said: " << error.what();
    broken_ = why.str();
    TORCH_CHECK(false, "quiver transport (", kind(), ", host ", host_, " of ", num_hosts_,
                "): ", broken_);
  }

  void check_not_broken() const {
    TORCH_CHECK(broken_.empty(), "quiver transport (", kind(), ", host ", host_,
                ") failed before and cannot be used again (its hosts may be out of step; ",
                "make a new one): ", broken_);
  }

  // A view of `rows` rows of `row_bytes` in `buffer` (CPU, kept across fetches:
  // runtime/kept_buffer.h).
  static at::Tensor kept_bytes(at::Tensor& buffer, int64_t rows, int64_t row_bytes, bool pinned) {
    const int64_t bytes = checked_product(rows, row_bytes, "a transport buffer's bytes");
    return kept_prefix(buffer, bytes,
                       at::TensorOptions(at::kByte).pinned_memory(pinned && at::hasCUDA()))
        .view({rows, row_bytes});
  }

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> lanes_;  // Gloo only (see collective)
  std::chrono::milliseconds timeout_;
  int64_t host_;
  int64_t num_hosts_;
  bool uses_gpus_;
  std::unique_ptr<PeerWatch> watch_;
  at::Tensor host_receive_;  // kept across fetches (see fetch)
  at::Tensor host_send_;     // likewise, the rows this host serves
  at::Tensor header_ids_;    // the header slots' placeholder indices, kept (zeros)
  int64_t capacity_ = 0;     // request slots per host of the slotted fetch (agreed, see there)
  at::Tensor summary_host_;  // pinned, kept: where the slotted fetch reads its summary back
  int64_t serial_ = 0;       // this transport's place among the group's (keys in the store)
  std::string broken_;       // why an exchange failed (then no more fetches), else empty
#ifdef QUIVER_WITH_CUDA
  std::unique_ptr<NcclDirect> direct_;  // see direct_on
  bool direct_decided_ = false;
  bool set_up_failed_ = false;
  std::optional<at::cuda::CUDAStream> direct_side_;  // the rows' exchange runs there
  cudaEvent_t exchanged_ = nullptr;                  // what wait_directly waits for
  cudaEvent_t rows_served_ = nullptr;                // the side stream starts after it
  cudaEvent_t rows_arrived_ = nullptr;               // and this stream goes on after it
#endif
};

}  // namespace

Transport::Transport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::vector<std::string> Transport::agree(const std::string& topic, const std::string& mine,
                                          int64_t* round) {
  return agree_among_hosts(*impl_->store(), topic, host(), num_hosts(), mine, impl_->timeout(),
                           round);
}

std::vector<std::string> Transport::agree_over(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                               const std::string& topic,
                                               const std::string& mine, double timeout_s) {
  TORCH_CHECK_VALUE(group, "Transport.agree needs a process group");
  return agree_among_hosts(*group->getStore(), topic, group->getRank(), group->getSize(), mine,
                           checked_timeout(timeout_s, "timeout"));
}

c10::Dict<std::string, int64_t> Transport::rdma_defaults() {
  const RdmaOptions defaults;
  c10::Dict<std::string, int64_t> named;
  named.insert("port", defaults.port);
  named.insert("gid_index", defaults.gid_index);
  named.insert("qps_per_peer", defaults.qps_per_peer);
  named.insert("staging_bytes", defaults.staging_bytes);
  return named;
}

c10::intrusive_ptr<Transport> Transport::collective(
    const c10::intrusive_ptr<c10d::ProcessGroup>& group, double timeout_s,
    std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> lanes) {
  TORCH_CHECK_VALUE(group, "Transport.collective needs a process group");
  return c10::make_intrusive<Transport>(
      std::make_unique<CollectiveTransport>(group, timeout_s, std::move(lanes)));
}

}  // namespace quiver::runtime
