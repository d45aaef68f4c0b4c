#include "runtime/slot_exchange.h"

#ifdef QUIVER_WITH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <quiver/shard_map.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "ops/checks.h"
#include "ops/errors.h"
#include "runtime/collective_channel.h"
#include "runtime/cuda/owner_slots.h"
#include "runtime/nccl_direct.h"
#include "runtime/phase_clock.h"
#include "runtime/wire_format.h"
#endif

namespace quiver::runtime {

#ifdef QUIVER_WITH_CUDA

// The communicator and what drives it: a side stream for the rows' exchange and the events
// that order it.
struct SlotExchange::Direct {
  std::unique_ptr<NcclDirect> comm;
  std::optional<at::cuda::CUDAStream> side;  // the rows' exchange runs there
  cudaEvent_t exchanged = nullptr;           // what a wait waits for
  cudaEvent_t rows_served = nullptr;         // the side stream starts after it
  cudaEvent_t rows_arrived = nullptr;        // and the caller's stream goes on after it

  ~Direct() {
    comm.reset();
    for (cudaEvent_t event : {exchanged, rows_served, rows_arrived}) {
      if (event != nullptr) cudaEventDestroy(event);
    }
  }
};

namespace {

// The words read back after a gather: the summary (owner_slots.h), then the slotting's
// status (the first id outside the map, the ids held here).
constexpr int64_t kStatusWords = 2;

}  // namespace

SlotExchange::SlotExchange(std::shared_ptr<CollectiveChannel> channel)
    : channel_(std::move(channel)) {
  TORCH_CHECK(channel_->uses_gpus(), "the slotted exchange is for NCCL groups");
}

SlotExchange::~SlotExchange() = default;

SlotExchange::Gathered SlotExchange::gather(const at::Tensor& ids, const ShardMap& map,
                                            LocalRows& mine) {
  // A gather that overflowed the slots grew them on every host: the next is complete.
  for (;;) {
    channel_->check_not_broken();
    if (auto gathered = gather_once(ids, map, mine)) return *std::move(gathered);
  }
}

std::optional<SlotExchange::Gathered> SlotExchange::gather_once(const at::Tensor& ids,
                                                                const ShardMap& map,
                                                                LocalRows& mine) {
  PhaseClock clock("slotted exchange");
  const at::Device device = ids.device();
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device.index()).stream();
  const int64_t host = channel_->host(), peers = channel_->num_hosts() - 1, n = ids.numel();
  const at::Tensor like = mine.empty_rows();
  const int64_t row_bytes = row_bytes_of(like), served_rows = mine.num_rows();
  const int64_t capacity = capacity_, header = wire::verdict_rows(row_bytes);
  const int64_t request_block = cuda::kSlotHeader + capacity, block_rows = header + capacity;
  const int64_t request_words = peers * request_block, safe_words = peers * block_rows;
  const int64_t summary_words = 5 * peers + 1 + kStatusWords;
  // The int64 words of a gather in one allocation and one memset (a gather's host time, not
  // its bytes, sets its pace). Zeroed: the requests sent, the slotting's status, the
  // refusals. Then the requests received, the checked indices served, the summary, and per
  // id its row in this host's table and where its row arrives.
  const int64_t zeroed = request_words + kStatusWords + peers;
  const auto long_options = at::TensorOptions(device).dtype(at::kLong);
  at::Tensor words =
      at::empty({zeroed + request_words + safe_words + summary_words + 2 * n}, long_options);
  C10_CUDA_CHECK(cudaMemsetAsync(words.mutable_data_ptr(), 0, zeroed * sizeof(int64_t), stream));
  int64_t at_word = 0;
  const auto take = [&](int64_t count) {
    at::Tensor part = words.narrow(0, at_word, count);
    at_word += count;
    return part;
  };
  at::Tensor sent = take(request_words), status = take(kStatusWords), refused = take(peers);
  at::Tensor asked = take(request_words), safe = take(safe_words);
  at::Tensor summary = take(summary_words), local_index = take(n), where = take(n);

  const at::Tensor packed = map.packed_on(device);
  AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "SlotExchange.gather", [&] {
    const cuda::OwnerSlotting<index_t> slotting{packed.const_data_ptr<int64_t>(),
                                                packed.size(0),
                                                ShardMap::kHostShift,
                                                ids.const_data_ptr<index_t>(),
                                                n,
                                                host,
                                                capacity,
                                                header,
                                                peers,
                                                sent.mutable_data_ptr<int64_t>(),
                                                local_index.mutable_data_ptr<int64_t>(),
                                                where.mutable_data_ptr<int64_t>(),
                                                status.mutable_data_ptr<int64_t>()};
    C10_CUDA_CHECK(cuda::slot_ids_by_owner(slotting, stream));
  });
  clock.lap("slot");

  // Rows that read on the stream are read between the exchanges without the host waiting
  // (a wait there could hang behind a peer that died); others wait for the requests first.
  const bool on_stream = mine.reads_on_stream(device);
  // A block per peer and none for this host: the split sizes are known to every host
  // without an exchange.
  const auto splits = [&](int64_t per_peer) {
    std::vector<int64_t> sizes(peers + 1, per_peer);
    sizes[host] = 0;
    return sizes;
  };
  Direct* direct = peers > 0 ? direct_on(device) : nullptr;
  const auto exchange_directly = [&](const at::Tensor& from, const at::Tensor& into,
                                     int64_t block_bytes, cudaStream_t on, const char* what) {
    try {
      direct->comm->exchange_blocks(from.const_data_ptr(), into.data_ptr(),
                                    static_cast<size_t>(block_bytes), on);
    } catch (const std::exception& error) {
      channel_->fail(what, error);
    }
  };
  // Waits for everything enqueued on the caller's stream so far, within the timeout.
  const auto wait_directly = [&](const char* what) {
    try {
      C10_CUDA_CHECK(cudaEventRecord(direct->exchanged, stream));
      direct->comm->wait(direct->exchanged, channel_->timeout());
    } catch (const std::exception& error) {
      channel_->fail(what, error);
    }
  };
  // From the first exchange until every host has read the summary, a failure of this host
  // alone leaves the peers waiting; past it, every host decides (and raises) alike.
  std::optional<MidExchange> mid_exchange;
  mid_exchange.emplace(*channel_, "requested rows and of rows");
  if (peers > 0) {
    if (direct != nullptr) {
      exchange_directly(sent, asked, request_block * sizeof(int64_t), stream, "requested rows");
      if (!on_stream) wait_directly("requested rows");
    } else {
      // Waited for on the host, within the timeout: through c10d, a stream made to wait on
      // a collective that never completes would stay blocked behind it.
      channel_->exchange(asked, sent, splits(request_block), splits(request_block),
                         "requested rows");
    }
  }
  clock.lap("ids");

  // The owner's side: the requests checked against its table, refused ones read as row 0.
  C10_CUDA_CHECK(cuda::check_slot_requests(asked.const_data_ptr<int64_t>(), peers, capacity,
                                           header, served_rows, safe.mutable_data_ptr<int64_t>(),
                                           refused.mutable_data_ptr<int64_t>(), stream));
  at::Tensor rows_out;
  if (served_rows > 0 && peers > 0) {
    rows_out = wire::as_bytes(mine.read(safe, device).contiguous())
                   .view({peers * block_rows, row_bytes});
  } else {  // an empty table has no row 0 to serve: every request refused
    rows_out = at::zeros({peers * block_rows, row_bytes}, long_options.dtype(at::kByte));
  }
  const int64_t block_bytes = block_rows * row_bytes;
  C10_CUDA_CHECK(cuda::write_slot_verdicts(static_cast<char*>(rows_out.mutable_data_ptr()), peers,
                                           block_bytes, refused.const_data_ptr<int64_t>(),
                                           stream));
  clock.lap("serve");

  // This host's own rows are read while the peers' travel (enqueued after the rows'
  // exchange, so that the exchange does not wait for them), where they read on the stream.
  at::Tensor own;
  const auto read_own = [&] {
    if (on_stream && served_rows > 0) own = mine.read(local_index, device);
  };
  at::Tensor rows_in = at::empty_like(rows_out);
  if (direct != nullptr) {
    // On a side stream, so that the own rows' read on this one runs beside the rows'
    // exchange (as beside c10d's, which runs on its own stream); this stream then waits
    // for the rows.
    const cudaStream_t side = direct->side->stream();
    C10_CUDA_CHECK(cudaEventRecord(direct->rows_served, stream));
    C10_CUDA_CHECK(cudaStreamWaitEvent(side, direct->rows_served, 0));
    exchange_directly(rows_out, rows_in, block_bytes, side, "rows");
    C10_CUDA_CHECK(cudaEventRecord(direct->rows_arrived, side));
    read_own();
    C10_CUDA_CHECK(cudaStreamWaitEvent(stream, direct->rows_arrived, 0));
  } else {
    c10::intrusive_ptr<c10d::Work> rows_work;
    if (peers > 0) {
      rows_work =
          channel_->post(rows_in, rows_out, splits(block_rows), splits(block_rows), "rows");
    }
    read_own();
    if (rows_work) channel_->await(rows_work, "rows");
  }
  clock.lap("rows");

  C10_CUDA_CHECK(cuda::summarize_slot_fetch(
      sent.const_data_ptr<int64_t>(), asked.const_data_ptr<int64_t>(), peers, capacity,
      refused.const_data_ptr<int64_t>(), static_cast<const char*>(rows_in.const_data_ptr()),
      block_bytes, status.const_data_ptr<int64_t>(), kStatusWords,
      summary.mutable_data_ptr<int64_t>(), stream));
  // Read back into pinned memory this exchange keeps: a plain copy, then one wait.
  if (!summary_host_.defined() || summary_host_.numel() < summary_words) {
    summary_host_ = at::empty({summary_words}, at::TensorOptions(at::kLong).pinned_memory(true));
  }
  C10_CUDA_CHECK(cudaMemcpyAsync(summary_host_.mutable_data_ptr(), summary.const_data_ptr(),
                                 summary_words * sizeof(int64_t), cudaMemcpyDeviceToHost,
                                 stream));
  if (direct != nullptr) {
    wait_directly("rows");  // the one wait, for rows and summary alike
  } else {
    C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  clock.lap(direct != nullptr ? "rows and summary" : "summary");
  mid_exchange.reset();
  const int64_t* word = summary_host_.const_data_ptr<int64_t>();
  const int64_t* asked_of = word;             // rows this host asked of peer p
  // (word + peers: rows p asked of this host)
  const int64_t* largest = word + 2 * peers;  // the most p asked of any host
  const int64_t* refused_here = word + 3 * peers;
  const int64_t* refused_there = word + 4 * peers;
  const int64_t* status_words = word + 5 * peers + 1;
  const auto host_of_peer = [&](int64_t p) { return p + (p >= host); };
  // Every host reads the same largest requests, so all decide alike here, before any
  // raises: whether the gather is complete, and the next capacity. A host that raised
  // before this (or skipped the retry of an incomplete gather) would leave the others
  // exchanging blocks of another size.
  const int64_t most = std::max(word[5 * peers], *std::max_element(largest, largest + peers));
  if (most < 0 || most > wire::kMostRowsAsked) {
    channel_->fail("slot requests", std::runtime_error("a host asked for " +
                                                       std::to_string(most) +
                                                       " rows of one host"));
  }
  // Grown past the largest request, with room for the next batches' spread; shrunk only
  // when far too large, so that it does not swing from batch to batch.
  const bool complete = most <= capacity;
  if (!complete || 2 * most + 256 < capacity) {
    constexpr int64_t kGrain = 256;
    capacity_ = (most + most / 16 + kGrain) / kGrain * kGrain;
  }
  if (!complete) {
    // Every host gathers again, this one too, whatever it found wrong here (it will find it
    // again, and raise then). The stream is past the reads: their faults may be dropped.
    try {
      mine.check_reads();
    } catch (const c10::Error&) {
    }
    return std::nullopt;
  }
  for (int64_t p = 0; p < peers; ++p) {
    wire::check_peer_served(host_of_peer(p), refused_there[p], asked_of[p], host);
  }
  for (int64_t p = 0; p < peers; ++p) {
    wire::check_peer_asked_within(host_of_peer(p), refused_here[p], host, served_rows);
  }
  // The stream is past the reads: their own checks, then the ids'.
  mine.check_reads();
  if (status_words[0] != 0) {
    const int64_t index = status_words[0] - 1;
    errors::id_out_of_range("ids", index, ids.select(0, index).item<int64_t>(), map.num_rows());
  }
  clock.lap("verdicts");

  Gathered gathered;
  gathered.held = status_words[1];
  if (served_rows == 0) {
    gathered.rows = at::empty(rows_like(like, n), like.options().device(device));
  } else {
    gathered.rows = on_stream ? own : mine.read(local_index, device);
  }
  // The peers' rows over this host's (where asked of a peer, the own read read row 0: a
  // wasted read, cheaper than counting the ids on the host).
  C10_CUDA_CHECK(cuda::scatter_slot_rows(static_cast<const char*>(rows_in.const_data_ptr()),
                                         row_bytes, where.const_data_ptr<int64_t>(), n,
                                         static_cast<char*>(gathered.rows.mutable_data_ptr()),
                                         stream));
  clock.lap("scatter");
  return gathered;
}

SlotExchange::Direct* SlotExchange::direct_on(const at::Device& device) {
  if (!direct_decided_) {
    // Decided once: after a failed set-up the hosts are out of step, and this exchange
    // raises from then on rather than try again.
    direct_decided_ = true;
    std::string why_not;
    std::unique_ptr<NcclDirect> comm;
    try {
      comm = NcclDirect::connect(
          *channel_->group().getStore(), "quiver/nccl/" + std::to_string(channel_->serial()) + "/",
          static_cast<int>(channel_->host()), static_cast<int>(channel_->num_hosts()),
          device.index(), channel_->timeout(), why_not);
    } catch (const std::exception& error) {
      set_up_failed_ = true;
      channel_->fail("the NCCL communicator's set-up", error);
    }
    if (!comm && tracing_transport()) {
      std::fprintf(stderr, "quiver transport: NCCL through c10d (%s)\n", why_not.c_str());
    }
    direct_ = std::make_unique<Direct>();
    if (comm) {
      direct_->comm = std::move(comm);
      for (cudaEvent_t* event :
           {&direct_->exchanged, &direct_->rows_served, &direct_->rows_arrived}) {
        C10_CUDA_CHECK(cudaEventCreateWithFlags(event, cudaEventDisableTiming));
      }
      direct_->side = at::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index());
    }
  }
  TORCH_CHECK(!set_up_failed_, channel_->owner(),
              ": its NCCL communicator's set-up failed in an earlier gather");
  if (!direct_->comm) return nullptr;
  TORCH_CHECK(direct_->comm->device() == device.index(),
              "this transport's NCCL communicator is on cuda:", direct_->comm->device(),
              ", but the rows are wanted on ", device);
  return direct_.get();
}

#else  // a build without CUDA has no slotted exchange (Transport::collective makes none)

struct SlotExchange::Direct {};

SlotExchange::SlotExchange(std::shared_ptr<CollectiveChannel> channel)
    : channel_(std::move(channel)) {
  TORCH_CHECK(false, "this build has no CUDA kernels for the slotted exchange");
}

SlotExchange::~SlotExchange() = default;

SlotExchange::Gathered SlotExchange::gather(const at::Tensor&, const ShardMap&, LocalRows&) {
  TORCH_CHECK(false, "this build has no CUDA kernels for the slotted exchange");
}

#endif

}  // namespace quiver::runtime
