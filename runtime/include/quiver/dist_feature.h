// torch.classes.quiver.DistFeature: a feature table split over hosts, read as one:
// gather(ids) returns the rows of global ids, on the ids' device. Rows this host holds
// (the replicated hottest rows and its own partition) come from its local layout
// (FeatureTiers: HBM cache and pinned host table, one kernel); rows of other hosts are
// grouped by owner and fetched through a Transport (read from the peers, or exchanged, this
// host serving its own rows as the transport's LocalRows), then placed into the one output.
//
// gather_async(ids) starts the same work on a side stream and thread and returns a
// FetchWork; wait(timeout) hands over the rows, ordered after the work on the caller's
// stream, or raises naming the peer that did not answer.
#pragma once

#include <memory>

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <quiver/feature_tiers.h>
#include <quiver/shard_map.h>
#include <quiver/transport.h>
#include <torch/custom_class.h>

#include <future>
#include <memory>
#include <mutex>

namespace quiver::runtime {

class FetchWork;

class DistFeature : public torch::CustomClassHolder {
 public:
  // `local` holds this host's local table (shard_map.local_rows(host) rows, local order);
  // `transport` connects the hosts, its rank being this host. Every host builds its
  // DistFeatures together, in the same order: they agree through the rendezvous store, and
  // every host raises (ValueError naming the hosts) when their shard maps, dtypes or row
  // shapes differ, or one of them cannot serve its share.
  DistFeature(c10::intrusive_ptr<ShardMap> shard_map, c10::intrusive_ptr<FeatureTiers> local,
              c10::intrusive_ptr<Transport> transport);
  ~DistFeature() override;

  // Rows of global ids (1-D int32/int64) on the ids' device. With a collective transport
  // every host calls gather together, once per step, gathering its DistFeatures in the
  // same order (a transport serves one fetch at a time); a host whose ids are bad still
  // serves its peers in that step, then raises. This host's own rows (for itself and for
  // its peers) come through the local layout's gather, with its options (staged host reads)
  // and host_read_blocks as FeatureTiers.gather takes it.
  at::Tensor gather(const at::Tensor& ids, int64_t host_read_blocks = 0);
  c10::intrusive_ptr<FetchWork> gather_async(const at::Tensor& ids, int64_t host_read_blocks = 0);

  int64_t host() const { return transport_->host(); }
  int64_t num_hosts() const { return transport_->num_hosts(); }
  // The share of ids served from this host's own table in the last gather.
  double last_local_fraction() const { return last_local_fraction_; }
  c10::intrusive_ptr<ShardMap> shard_map() const { return shard_map_; }
  c10::intrusive_ptr<FeatureTiers> local() const { return local_; }
  c10::intrusive_ptr<Transport> transport() const { return transport_; }

 private:
  // This host's table as the transports read it (its local layout, with the gather's block
  // cap): defined in dist_feature.cpp.
  class TableRows;

  // The gather with a slotted transport (NCCL): the transport's slotted exchange, one wait.
  at::Tensor gather_in_slots(SlotExchange& slots, const at::Tensor& ids);
  // The gather with any transport: ids grouped by owner, the groups fetched, the rows
  // placed.
  at::Tensor gather_grouped(const at::Tensor& ids);
  // A view of `rows` rows in `buffer` (CPU, kept across gathers, grown when short).
  at::Tensor kept_rows(at::Tensor& buffer, int64_t rows);

  c10::intrusive_ptr<ShardMap> shard_map_;
  c10::intrusive_ptr<FeatureTiers> local_;
  c10::intrusive_ptr<Transport> transport_;
  std::unique_ptr<TableRows> table_rows_;
  int64_t tag_ = 0;  // this DistFeature among those built over the store: the same on every host
  double last_local_fraction_ = 0;
  // A kept CPU buffer of the Gloo path (see gather_grouped): this host's own rows before
  // they are scattered into the output.
  at::Tensor held_rows_;
};

// The pending result of DistFeature.gather_async.
class FetchWork : public torch::CustomClassHolder {
 public:
  // The rows, and (on a GPU) an event recorded after the side stream's work on them.
  struct Fetched {
    at::Tensor rows;
    std::shared_ptr<c10::Event> written;
  };
  explicit FetchWork(std::future<Fetched> fetched);
  // The rows, once fetched (at most timeout_s seconds from now, < 0: no limit, as
  // ServingRuntime::wait; raises RuntimeError if the fetch is not done by then, or
  // rethrows its failure). The caller's current stream is
  // ordered after the fetch's work. Dropping a FetchWork never waits: an unfinished fetch
  // ends on its own thread, within the transport's timeout.
  // Safe from several threads: one takes the rows, the others raise.
  at::Tensor wait(double timeout_s);
  bool done() const;

 private:
  // Shared, so that threads may wait on it together; the rows go to the first that takes
  // them (under taken_mutex_).
  std::shared_future<Fetched> fetched_;
  mutable std::mutex taken_mutex_;
  bool taken_ = false;
};

}  // namespace quiver::runtime
