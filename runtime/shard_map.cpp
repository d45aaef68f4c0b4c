#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <quiver/ops.h>
#include <quiver/shard_map.h>

#include "ops/checks.h"
#include "ops/errors.h"
#include "ops/sampling_rules.h"

namespace quiver::runtime {
namespace {

at::Tensor as_cpu_index(const at::Tensor& t, at::ScalarType dtype, const char* name) {
  TORCH_CHECK_VALUE(!t.is_meta(), name, " is on the meta device, which holds no data");
  TORCH_CHECK_VALUE(t.dim() == 1, name, " must be a 1-D tensor, got shape ", t.sizes());
  TORCH_CHECK_TYPE(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), name,
                   " must hold integers, got ", errors::dtype_name(t.scalar_type()));
  if (t.scalar_type() == at::kUInt64 && t.numel() > 0) {
    // Past int64's range a value turns negative in the conversion (2**64 - 1 read as host
    // -1, a replicated row); its bits as int64 are negative exactly then.
    const int64_t least = t.view(at::kLong).min().item<int64_t>();
    TORCH_CHECK_VALUE(least >= 0, name, " holds ", static_cast<uint64_t>(least),
                      ", past int64's range");
  }
  // Always a copy of its own: the map checks its rows once, here, and later reads trust them
  // (an owner out of range would index past a per-host table), so a caller's later write to
  // the tensor it passed must not reach them.
  return t.to(at::kCPU, dtype, /*non_blocking=*/false, /*copy=*/true).contiguous();
}

// Order-independent checksum of (id, host, local) triples: the same map gives the same
// value on every host, however the rows are traversed.
int64_t checksum(const at::Tensor& host_of, const at::Tensor& local_index) {
  const int32_t* host = host_of.const_data_ptr<int32_t>();
  const int64_t* local = local_index.const_data_ptr<int64_t>();
  return at::parallel_reduce(
      0, host_of.numel(), 1 << 16, int64_t{0},
      [&](int64_t lo, int64_t hi, int64_t acc) {
        uint64_t x = static_cast<uint64_t>(acc);
        for (int64_t id = lo; id < hi; ++id) {
          x ^= mix_node_id(static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ULL ^
                           (static_cast<uint64_t>(host[id] + 1) << 48) ^
                           static_cast<uint64_t>(local[id]));
        }
        return static_cast<int64_t>(x);
      },
      [](int64_t a, int64_t b) {
        return static_cast<int64_t>(static_cast<uint64_t>(a) ^ static_cast<uint64_t>(b));
      });
}

// A row's owner and local index share one int64 word (packed_on): the owner + 1 in the bits
// above kHostShift (positive, so fewer than 2^15 of them), the index below.
void check_host_count(int64_t num_hosts) {
  constexpr int64_t kMostHosts = (int64_t{1} << (63 - ShardMap::kHostShift)) - 1;
  TORCH_CHECK_VALUE(num_hosts >= 1 && num_hosts <= kMostHosts, "num_hosts must be in [1, ",
                    kMostHosts, "], got ", num_hosts);
}

// host_of as int32, its values checked as given: converted first, 2^32 read as host 0.
at::Tensor checked_host_of(const at::Tensor& host_of, int64_t num_hosts) {
  check_host_count(num_hosts);
  const at::Tensor wide = as_cpu_index(host_of, at::kLong, "host_of");
  if (wide.numel() > 0) {
    const int64_t low = wide.min().item<int64_t>(), high = wide.max().item<int64_t>();
    TORCH_CHECK_VALUE(low >= -1 && high < num_hosts, "host_of holds host ", low < -1 ? low : high,
                      ", outside [-1, ", num_hosts, ")");
  }
  return wide.to(at::kInt);
}

}  // namespace

ShardMap::ShardMap(at::Tensor host_of, at::Tensor local_index, int64_t num_hosts)
    : host_of_(checked_host_of(host_of, num_hosts)),
      local_index_(as_cpu_index(local_index, at::kLong, "local_index")),
      num_hosts_(num_hosts) {
  TORCH_CHECK_VALUE(host_of_.numel() < (int64_t{1} << kHostShift), "a shard map holds fewer ",
                    "than 2^", kHostShift, " rows, got ", host_of_.numel());
  TORCH_CHECK_VALUE(host_of_.numel() == local_index_.numel(), "host_of has ", host_of_.numel(),
                    " rows but local_index has ", local_index_.numel());
  const int64_t n = host_of_.numel();
  // Group g = host + 1 (group 0: the replicated rows). Each group's local indices must be
  // exactly [base_g, base_g + count_g): base 0 for replicated rows, R for a host's own.
  const at::Tensor group = (host_of_ + 1).to(at::kLong);
  const at::Tensor counts = at::bincount(group, /*weights=*/{}, num_hosts + 1);
  const int64_t* counts_p = counts.const_data_ptr<int64_t>();
  num_replicated_ = counts_p[0];
  for (int64_t h = 0; h < num_hosts; ++h) local_rows_.push_back(num_replicated_ + counts_p[h + 1]);
  const at::Tensor starts = counts.cumsum(0) - counts;
  const at::Tensor base = at::where(group == 0, 0, num_replicated_);
  const at::Tensor within = local_index_ - base;
  const at::Tensor fits = (within >= 0) & (within < counts.index_select(0, group));
  if (n > 0 && !fits.all().item<bool>()) {
    const int64_t id = fits.logical_not().nonzero()[0][0].item<int64_t>();
    const int64_t host = host_of_[id].item<int64_t>();
    TORCH_CHECK_VALUE(
        false, "local_index[", id, "] = ", local_index_[id].item<int64_t>(), " is outside ",
        host < 0
            ? std::string("the replicated rows [0, ")
            : "host " + std::to_string(host) + "'s rows [" + std::to_string(num_replicated_) + ", ",
        host < 0 ? num_replicated_ : local_rows_[host], ")");
  }
  at::Tensor seen = at::zeros({n}, at::kBool);
  seen.index_put_({starts.index_select(0, group) + within}, at::ones({1}, at::kBool));
  if (n > 0 && !seen.all().item<bool>()) {
    TORCH_CHECK_VALUE(false,
                      "local_index names a row of some host twice (and leaves another "
                      "empty): each host's local indices must be distinct");
  }
  fingerprint_ = checksum(host_of_, local_index_) ^ (num_hosts << 1);
}

c10::intrusive_ptr<ShardMap> ShardMap::build(const at::Tensor& hot_order, int64_t num_hosts,
                                             int64_t num_replicated,
                                             const std::optional<at::Tensor>& assignment) {
  const at::Tensor order = as_cpu_index(hot_order, at::kLong, "hot_order");
  const int64_t n = order.numel();
  check_host_count(num_hosts);
  TORCH_CHECK_VALUE(num_replicated >= 0 && num_replicated <= n, "num_replicated must be in [0, ", n,
                    "], got ", num_replicated);
  check_permutation(order, n, "hot_order");
  at::Tensor host;
  if (assignment.has_value()) {
    host = as_cpu_index(*assignment, at::kLong, "assignment");
    TORCH_CHECK_VALUE(host.numel() == n, "assignment names a host for ", host.numel(),
                      " rows but the table has ", n);
    if (n > 0) {
      const int64_t low = host.min().item<int64_t>(), high = host.max().item<int64_t>();
      TORCH_CHECK_VALUE(low >= 0 && high < num_hosts, "assignment holds host ",
                        low < 0 ? low : high, ", outside [0, ", num_hosts, ")");
    }
  } else {  // contiguous ranges of ids, of (nearly) equal size once replicated rows are out
    at::Tensor shared = at::zeros({n}, at::kBool);
    shared.index_put_({order.slice(0, 0, num_replicated)}, at::ones({1}, at::kBool));
    const int64_t rest = n - num_replicated;
    const at::Tensor rank_by_id = shared.logical_not().to(at::kLong).cumsum(0) - 1;
    host = rest == 0 ? at::zeros({n}, at::kLong)
                     : rank_by_id.clamp_min(0).mul(num_hosts).div(rest, "floor");
  }
  at::Tensor host_of = host.to(at::kInt).clone();
  at::Tensor local_index = at::empty({n}, at::kLong);
  const at::Tensor replicated = order.slice(0, 0, num_replicated);
  host_of.index_put_({replicated}, at::full({1}, -1, at::kInt));
  local_index.index_put_({replicated}, at::arange(num_replicated, at::kLong));
  // The rest keep hot order within their host: a stable sort of the hot order by host.
  const at::Tensor rest = order.slice(0, num_replicated);
  const at::Tensor rest_host = host.index_select(0, rest);
  const at::Tensor by_host = std::get<1>(rest_host.sort(/*stable=*/true, 0, false));
  const at::Tensor grouped = rest.index_select(0, by_host);
  const at::Tensor grouped_host = rest_host.index_select(0, by_host);
  const at::Tensor counts = at::bincount(grouped_host, {}, num_hosts);
  const at::Tensor starts = counts.cumsum(0) - counts;
  local_index.index_put_({grouped}, at::arange(grouped.numel(), at::kLong) -
                                        starts.index_select(0, grouped_host) + num_replicated);
  return c10::make_intrusive<ShardMap>(host_of, local_index, num_hosts);
}

int64_t ShardMap::local_rows(int64_t host) const {
  TORCH_CHECK_INDEX(host >= 0 && host < num_hosts_, "host ", host, " is out of range [0, ",
                    num_hosts_, ")");
  return local_rows_[host];
}

at::Tensor ShardMap::local_ids(int64_t host) const {
  const int64_t rows = local_rows(host);
  const at::Tensor mine = (host_of_ == host) | (host_of_ == -1);
  const at::Tensor ids = mine.nonzero().view(-1);
  at::Tensor out = at::empty({rows}, at::kLong);
  out.index_put_({local_index_.index_select(0, ids)}, ids);
  return out;
}

at::Tensor ShardMap::packed_on(const at::Device& device) const {
  std::lock_guard<std::mutex> lock(packed_mutex_);
  const std::string key = device.str();
  auto found = packed_.find(key);
  if (found == packed_.end()) {
    const at::Tensor cpu = at::bitwise_left_shift(host_of_.to(at::kLong) + 1, kHostShift)
                               .bitwise_or(local_index_)
                               .view({-1, 1});
    found = packed_.emplace(key, device.is_cuda() ? cpu.to(device) : cpu).first;
  }
  return found->second;
}

std::tuple<at::Tensor, at::Tensor> ShardMap::locate(const at::Tensor& ids) const {
  const at::Tensor packed = packed_on(ids.device());
  if (ids.device().is_cpu()) {
    // One parallel pass that checks, looks up and unpacks, where the three tensor ops below
    // each allocate and walk a batch's worth of words: 0.4-0.5 ms against 1.3-5.8 ms for
    // 110,000 ids on a two-H200 host (QUIVER_TRACE_TRANSPORT, docs/benchmarks.md).
    check_index_vector(ids, "ids");  // contiguous too
    const int64_t n = ids.numel(), num_rows = packed.size(0);
    at::Tensor owner = at::empty({n}, ids.options().dtype(at::kLong));
    at::Tensor local = at::empty({n}, ids.options().dtype(at::kLong));
    const int64_t* word = packed.const_data_ptr<int64_t>();
    int64_t* owner_of = owner.mutable_data_ptr<int64_t>();
    int64_t* local_of = local.mutable_data_ptr<int64_t>();
    constexpr int64_t kLocalMask = (int64_t{1} << kHostShift) - 1;
    AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "ShardMap.locate", [&] {
      const index_t* asked = ids.const_data_ptr<index_t>();
      at::parallel_for(0, n, int64_t{1} << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          const int64_t row = static_cast<int64_t>(asked[i]);
          if (row < 0 || row >= num_rows) errors::id_out_of_range("ids", i, row, num_rows);
          owner_of[i] = (word[row] >> kHostShift) - 1;
          local_of[i] = word[row] & kLocalMask;
        }
      });
    });
    return {owner, local};
  }
  // The op checks every id against the map (IndexError, never a device assert).
  const at::Tensor rows = quiver::gather_rows(packed, ids).view(-1);
  return {at::bitwise_right_shift(rows, kHostShift) - 1,
          rows.bitwise_and((int64_t{1} << kHostShift) - 1)};
}

c10::intrusive_ptr<ShardMap> ShardMap::from_state(State state) {
  return c10::make_intrusive<ShardMap>(std::get<0>(state), std::get<1>(state), std::get<2>(state));
}

}  // namespace quiver::runtime
