// Transport::collective: rows exchanged with torch.distributed collectives over a c10d
// process group (one rank per host): NCCL between GPUs, Gloo on CPUs.
//
// CollectiveExchange (every backend) is three all-to-alls: request counts (with the
// caller's tag and row size, so that exchanges that do not pair are refused by every host
// before any row moves), the requested local indices, and the rows, each peer's rows led by
// a header that carries the owner's verdict (runtime/wire_format.h). Owners check every
// requested index and serve a refused one as row 0, so that the exchange completes on
// every host before both sides raise; nothing is left waiting. Every exchange is waited for
// on the host, within the timeout (a stream that waited on a dead peer would hang the next
// synchronization). Over NCCL the transport also has the slotted exchange
// (runtime/slot_exchange.h), over the same channel.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <quiver/transport.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "ops/checks.h"
#include "runtime/collective_channel.h"
#include "runtime/host_agreement.h"
#include "runtime/kept_buffer.h"
#include "runtime/phase_clock.h"
#include "runtime/slot_exchange.h"
#include "runtime/wire_format.h"

namespace quiver::runtime {
namespace {

// The words each host sends each host before an exchange: rows asked for, the caller's
// tag, the row size.
constexpr int64_t kCountWords = 3;

// a * b, or a ValueError naming `what` when it overflows int64.
int64_t checked_product(int64_t a, int64_t b, const char* what) {
  int64_t product = 0;
  TORCH_CHECK_VALUE(!__builtin_mul_overflow(a, b, &product), what, ": ", a, " x ", b,
                    " overflows");
  return product;
}

class CollectiveExchange final : public RowExchange {
 public:
  explicit CollectiveExchange(std::shared_ptr<CollectiveChannel> channel)
      : channel_(std::move(channel)),
        host_(channel_->host()),
        num_hosts_(channel_->num_hosts()),
        uses_gpus_(channel_->uses_gpus()) {}

  std::vector<at::Tensor> exchange(const std::vector<at::Tensor>& requests, LocalRows& mine,
                                   const at::Device& device, int64_t tag) override {
    channel_->check_not_broken();
    const at::Tensor like = mine.empty_rows();
    const int64_t served_rows = mine.num_rows();
    const at::Device comm = uses_gpus_ ? device : at::Device(at::kCPU);
    TORCH_CHECK(!uses_gpus_ || device.is_cuda(),
                "an NCCL transport moves rows between GPUs, "
                "but the rows are wanted on ",
                device);
    const auto ids_options = at::TensorOptions(comm).dtype(at::kLong);

    PhaseClock clock("collective exchange");
    // Each peer's part of a message leads with `header_rows` slots: in the requested
    // indices they are placeholders (index 0) that the one gather on the owner fills, and in
    // the rows the owner writes its verdict into their first 8 bytes. So the rows go out
    // without another copy, and the verdicts without another exchange.
    const int64_t row_bytes = row_bytes_of(like);
    const int64_t header_rows = wire::verdict_rows(row_bytes);

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
    channel_->exchange(counts_in, counts_out, {}, {}, "request counts");
    const at::Tensor counts_host = counts_in.cpu();
    const int64_t* count_in = counts_host.const_data_ptr<int64_t>();
    // Every host checks every peer's words before anything else moves: a fetch that does
    // not pair raises on both sides of it, and the hosts stay in step.
    for (int64_t h = 0; h < num_hosts_; ++h) {
      const int64_t* words = count_in + kCountWords * h;
      TORCH_CHECK_VALUE(words[1] == tag && words[2] == row_bytes, channel_->owner(), ": host ",
                        h, " fetched rows of ", words[2],
                        " bytes for table ", words[1], " while this host fetched rows of ",
                        row_bytes, " bytes for table ", tag,
                        ". Over a collective transport every host must gather the same "
                        "tables in the same order (two tables gathered by two threads over "
                        "one transport cannot be paired: give each its own transport)");
      recv_counts[h] = words[0];
      if (recv_counts[h] < 0 || recv_counts[h] > wire::kMostRowsAsked) {
        channel_->fail("request counts", std::runtime_error("host " + std::to_string(h) + " asked for " +
                                                  std::to_string(recv_counts[h]) + " rows"));
      }
    }
    clock.lap("counts");
    // From here until the rows have moved, a failure of this host alone leaves the peers
    // waiting; past it (the verdicts), every host raises in step.
    std::optional<MidExchange> mid_exchange;
    mid_exchange.emplace(*channel_, "requested rows and of rows");

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
    channel_->exchange(ids_in, ids_out, recv_ids, send_ids, "requested rows");
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
      mine.read_into(safe_ids, typed(bytes_out));
    } else {
      bytes_out = wire::as_bytes(mine.read(safe_ids, comm).contiguous()).view({asked, row_bytes});
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
    if (channel_->lanes().empty()) {
      channel_->exchange(bytes_in, bytes_out, send_ids, recv_ids, "rows");
    } else {
      channel_->exchange_over_lanes(bytes_in, bytes_out, send_ids, recv_ids, header_rows, "rows");
    }
    clock.lap("rows");
    mid_exchange.reset();

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
    mine.check_reads();  // the copy waited for the serving reads
    const int64_t* verdict = verdicts.const_data_ptr<int64_t>();
    for (int64_t h = 0; h < num_hosts_; ++h) {
      if (send_counts[h] == 0) continue;
      wire::check_peer_served(h, *verdict, send_counts[h], host_);
      ++verdict;
    }
    for (int64_t h = 0; h < num_hosts_; ++h) {
      wire::check_peer_asked_within(h, verdict[h], host_, served_rows);
    }
    std::vector<at::Tensor> out;
    for (int64_t h = 0; h < num_hosts_; ++h) {
      out.push_back(
          typed(bytes_in.narrow(0, answer_at[h] + header_rows, send_counts[h])).to(device));
    }
    return out;
  }

 private:
  // A view of `rows` rows of `row_bytes` in `buffer` (CPU, kept across exchanges:
  // runtime/kept_buffer.h).
  static at::Tensor kept_bytes(at::Tensor& buffer, int64_t rows, int64_t row_bytes, bool pinned) {
    const int64_t bytes = checked_product(rows, row_bytes, "a transport buffer's bytes");
    return kept_prefix(buffer, bytes,
                       at::TensorOptions(at::kByte).pinned_memory(pinned && at::hasCUDA()))
        .view({rows, row_bytes});
  }

  std::shared_ptr<CollectiveChannel> channel_;
  int64_t host_;
  int64_t num_hosts_;
  bool uses_gpus_;
  at::Tensor host_receive_;  // kept across exchanges (see exchange)
  at::Tensor host_send_;     // likewise, the rows this host serves
  at::Tensor header_ids_;    // the header slots' placeholder indices, kept (zeros)
};

}  // namespace

c10::intrusive_ptr<Transport> Transport::collective(
    const c10::intrusive_ptr<c10d::ProcessGroup>& group, double timeout_s,
    std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> lanes) {
  TORCH_CHECK_VALUE(group, "Transport.collective needs a process group");
  Parts parts;
  parts.kind = "collective:" + group->getBackendName();
  parts.store = group->getStore();
  parts.timeout = checked_timeout(timeout_s, "the transport's timeout");
  parts.host = group->getRank();
  parts.num_hosts = group->getSize();
  auto channel = std::make_shared<CollectiveChannel>(
      group, std::move(lanes), parts.timeout, "collective",
      "quiver transport (" + parts.kind + ", host " + std::to_string(parts.host) + " of " +
          std::to_string(parts.num_hosts) + ")");
#ifdef QUIVER_WITH_CUDA
  if (channel->uses_gpus()) parts.slots = std::make_shared<SlotExchange>(channel);
#endif
  parts.exchange = std::make_unique<CollectiveExchange>(std::move(channel));
  return c10::make_intrusive<Transport>(std::move(parts));
}

}  // namespace quiver::runtime
