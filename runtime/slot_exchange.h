// The slotted exchange of a collective transport over NCCL (quiver/transport.h): global ids
// on a GPU in, their rows out, with one host wait. Requests and rows travel in equal
// per-host blocks of slots (runtime/cuda/owner_slots.h), so that no count is read back
// before the rows move: the owner checks and serves on the stream between the two
// exchanges. The exchange owns its wire format, its capacity and its retry: a gather whose
// requests overflowed some host's slots is known as such to every host, the capacity grows
// alike on all, and every host gathers again.
//
// The two exchanges go through a communicator of the exchange's own
// (runtime/nccl_direct.h) rather than c10d's all-to-all, whose posts cost 50-120 us each:
// 102-119 GB/s in 9 of 11 rounds on two H200s, against 53-115 through c10d in the same
// runs; one wait instead of four took the same host from 38 to 90-109 GB/s
// (docs/benchmarks.md).
#pragma once

#include <ATen/core/Tensor.h>
#include <quiver/transport.h>

#include <memory>
#include <optional>

namespace quiver::runtime {

class CollectiveChannel;
class ShardMap;

class SlotExchange {
 public:
  // Exchanges over `channel` (an NCCL group's), which it shares with the transport's other
  // exchange: a failure of either ends both.
  explicit SlotExchange(std::shared_ptr<CollectiveChannel> channel);
  ~SlotExchange();
  SlotExchange(const SlotExchange&) = delete;
  SlotExchange& operator=(const SlotExchange&) = delete;

  struct Gathered {
    at::Tensor rows;   // the rows of the ids, on the ids' GPU
    int64_t held = 0;  // how many ids this host's own rows answered
  };
  // The rows of global `ids` (int32 or int64 on this host's GPU; empty for a host that
  // takes part without asking) under `map`, this host serving its peers from `mine` (and
  // its own ids too). Every host calls it together. An id outside the map raises
  // IndexError after the exchange, so no peer is left waiting.
  Gathered gather(const at::Tensor& ids, const ShardMap& map, LocalRows& mine);

 private:
  // One exchange at the current capacity; none when some host's requests overflowed it
  // (then every host gathers again, at the grown capacity).
  std::optional<Gathered> gather_once(const at::Tensor& ids, const ShardMap& map,
                                      LocalRows& mine);
  // The communicator of the exchange's own, made at the first gather, which every host
  // reaches together; null when some host cannot drive NCCL directly (then c10d's
  // all-to-all moves the blocks).
  struct Direct;
  Direct* direct_on(const at::Device& device);

  std::shared_ptr<CollectiveChannel> channel_;
  int64_t capacity_ = 0;     // request slots per host (agreed: see gather_once)
  at::Tensor summary_host_;  // pinned, kept: where a gather reads its summary back
  std::unique_ptr<Direct> direct_;
  bool direct_decided_ = false;
  bool set_up_failed_ = false;
};

}  // namespace quiver::runtime
