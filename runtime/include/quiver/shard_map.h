// torch.classes.quiver.ShardMap: where each row of a feature table split over hosts lives.
//
// Every host keeps a local table: first the `num_replicated` hottest rows (the same rows,
// in the same order, on every host), then its own partition of the rest. For a global row
// id, host_of[id] is -1 when the row is replicated (every host has it) and the owning host
// otherwise; local_index[id] is its row in the owner's local table (in [0, num_replicated)
// for replicated rows). Hosts are numbered 0 .. num_hosts - 1: the ranks of the group
// the rows travel over.
//
// Usable from Python, TorchScript and C++, and pickled as its two tensors (def_pickle), so a
// scripted model that holds one can be saved.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>

namespace quiver::runtime {

class ShardMap : public torch::CustomClassHolder {
 public:
  // Checks that the map is whole: host_of (int32) in [-1, num_hosts), and the local
  // indices of each host's rows (and of the replicated rows) exactly [R, R + P_h) (and
  // [0, R)). Raises ValueError/TypeError naming what is wrong.
  ShardMap(at::Tensor host_of, at::Tensor local_index, int64_t num_hosts);

  // The hottest `num_replicated` ids of hot_order (a permutation of the rows, hottest
  // first) are replicated; every other row goes to host assignment[id] when an assignment
  // (int, one host per row, e.g. METIS parts) is given, else to contiguous ranges of ids,
  // each host getting a nearly equal share of the rows not replicated. Within a host, rows
  // keep hot order, so its hottest rows come first.
  static c10::intrusive_ptr<ShardMap> build(const at::Tensor& hot_order, int64_t num_hosts,
                                            int64_t num_replicated,
                                            const std::optional<at::Tensor>& assignment);

  int64_t num_rows() const { return host_of_.numel(); }
  int64_t num_hosts() const { return num_hosts_; }
  int64_t num_replicated() const { return num_replicated_; }
  // Rows of host's local table (replicated rows included).
  int64_t local_rows(int64_t host) const;
  // Global ids of host's local table, in local order (int64).
  at::Tensor local_ids(int64_t host) const;
  // Copies: the map's own tensors were checked once and are trusted from then on.
  at::Tensor host_of() const { return host_of_.clone(); }
  at::Tensor local_index() const { return local_index_.clone(); }

  // For ids (1-D int32/int64, any device): (host_of[ids], local_index[ids]) as int64 on
  // the ids' device. Out-of-range ids raise IndexError (no device assert). The map is
  // copied to a device once, at its first use there.
  std::tuple<at::Tensor, at::Tensor> locate(const at::Tensor& ids) const;

  // The map as one int64 word per row, (host_of + 1) << kHostShift | local_index, on
  // `device` (copied there once): what locate gathers, and what the slotted fetch reads.
  static constexpr int kHostShift = 48;
  at::Tensor packed_on(const at::Device& device) const;

  // A checksum of the map, equal on every host that holds the same map: hosts compare it
  // before they fetch from each other.
  int64_t fingerprint() const { return fingerprint_; }

  using State = std::tuple<at::Tensor, at::Tensor, int64_t>;
  // Copies, as host_of() and local_index() are: the rows were checked once, and a write to
  // the state's tensors reached the live map (a fetch then read past a host's table).
  State state() const { return {host_of_.clone(), local_index_.clone(), num_hosts_}; }
  static c10::intrusive_ptr<ShardMap> from_state(State state);

 private:
  at::Tensor host_of_;      // int32 [N]
  at::Tensor local_index_;  // int64 [N]
  int64_t num_hosts_;
  int64_t num_replicated_ = 0;
  std::vector<int64_t> local_rows_;  // per host, replicated rows included
  int64_t fingerprint_ = 0;
  // The packed map per device (see packed_on).
  mutable std::mutex packed_mutex_;
  mutable std::unordered_map<std::string, at::Tensor> packed_;
};

}  // namespace quiver::runtime
