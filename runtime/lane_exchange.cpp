#include "runtime/lane_exchange.h"

#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>

#include <algorithm>

#include "runtime/collective_wait.h"

namespace quiver::runtime {

void check_lanes(const std::vector<c10::intrusive_ptr<c10d::ProcessGroup>>& lanes,
                 const c10d::ProcessGroup& group, const char* owner) {
  if (lanes.empty()) return;
  TORCH_CHECK_VALUE(group.getBackendName() == "gloo", owner,
                    ": only a Gloo group's exchanges take lanes; this one is ",
                    group.getBackendName());
  const int64_t host = group.getRank(), num_hosts = group.getSize();
  for (size_t j = 0; j < lanes.size(); ++j) {
    TORCH_CHECK_VALUE(lanes[j] && lanes[j]->getBackendName() == "gloo", owner, ": lanes[", j,
                      "] must be a Gloo group (only Gloo exchanges take lanes)");
    // A lane that is the main group, or another lane, posts its exchanges on a group that
    // already carries others at once: the hosts could pair one's rows with the other's.
    TORCH_CHECK_VALUE(lanes[j].get() != &group, owner, ": lanes[", j,
                      "] is the main group itself: each lane must be a Gloo group of its own");
    for (size_t k = 0; k < j; ++k) {
      TORCH_CHECK_VALUE(lanes[k] != lanes[j], owner, ": lanes[", k, "] and lanes[", j,
                        "] are one group: each lane must be a Gloo group of its own");
    }
    TORCH_CHECK_VALUE(lanes[j]->getRank() == host && lanes[j]->getSize() == num_hosts, owner,
                      ": lanes[", j, "] is rank ", lanes[j]->getRank(), " of ",
                      lanes[j]->getSize(), ", but the main group makes this host ", host, " of ",
                      num_hosts, ": lanes must span the same hosts");
  }
}

namespace {

int64_t row_bytes(const at::Tensor& rows) {
  return c10::multiply_integers(rows.sizes().slice(1)) * static_cast<int64_t>(rows.element_size());
}

}  // namespace

int64_t parts_for_block(int64_t bytes, int64_t num_lanes) {
  return std::clamp<int64_t>(bytes / kMinLanePartBytes, 1, std::max<int64_t>(num_lanes, 1));
}

void exchange_over_lanes(const std::vector<c10::intrusive_ptr<c10d::ProcessGroup>>& lanes,
                         int64_t host, at::Tensor& into, const at::Tensor& from,
                         const std::vector<int64_t>& into_rows,
                         const std::vector<int64_t>& from_rows, int64_t header,
                         std::chrono::milliseconds timeout, const LaneFailed& failed) {
  const int64_t num_lanes = static_cast<int64_t>(lanes.size());
  const int64_t num_hosts = static_cast<int64_t>(into_rows.size());
  TORCH_CHECK(num_lanes > 0 && static_cast<int64_t>(from_rows.size()) == num_hosts,
              "exchange_over_lanes: needs lanes and one row count per host each way");
  using Posted = c10::intrusive_ptr<c10d::Work>;
  std::vector<Posted> receives, sends;
  std::vector<int64_t> into_at(num_hosts, 0), from_at(num_hosts, 0);
  for (int64_t h = 1; h < num_hosts; ++h) {
    into_at[h] = into_at[h - 1] + into_rows[h - 1];
    from_at[h] = from_at[h - 1] + from_rows[h - 1];
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int64_t into_row_bytes = row_bytes(into), from_row_bytes = row_bytes(from);
  const auto post = [&](bool send, int64_t lane, int64_t h, int64_t rows, int64_t at) {
    // A block's sender and receiver see the same bytes (a message's two ends), so they
    // cut it into the same parts without telling each other.
    const int64_t parts =
        parts_for_block(rows * (send ? from_row_bytes : into_row_bytes), num_lanes);
    if (lane >= parts) return;
    const int64_t data = rows - header;
    const int64_t begin = lane == 0 ? 0 : header + data * lane / parts;
    const int64_t end = header + data * (lane + 1) / parts;
    if (end <= begin) return;
    std::vector<at::Tensor> message{
        (send ? from : into).narrow(0, at + begin, end - begin).view(-1)};
    const int peer = static_cast<int>(h);
    auto& posted = send ? sends : receives;
    posted.push_back(send ? lanes[lane]->send(message, peer, 0)
                          : lanes[lane]->recv(message, peer, 0));
  };
  const auto wait = [&](const Posted& posted) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !posted->wait(left)) no_answer_within(timeout);
  };
  try {
    for (int64_t j = 0; j < num_lanes; ++j) {
      for (int64_t h = 0; h < num_hosts; ++h) {
        if (h != host) post(false, j, h, into_rows[h], into_at[h]);
      }
    }
    // What this host asked of itself: a copy.
    into.narrow(0, into_at[host], into_rows[host])
        .copy_(from.narrow(0, from_at[host], from_rows[host]));
    for (int64_t j = 0; j < num_lanes; ++j) {
      for (int64_t h = 0; h < num_hosts; ++h) {
        if (h != host) post(true, j, h, from_rows[h], from_at[h]);
      }
    }
    for (const Posted& receive : receives) wait(receive);
    for (const Posted& send : sends) wait(send);
  } catch (const std::exception& error) {
    // Whatever is still posted must not read or write these tensors after this returns.
    for (auto* posted : {&receives, &sends}) {
      for (Posted& message : *posted) {
        try {
          message->abort();
        } catch (const std::exception&) {  // a backend without abort: nothing more to do
        }
      }
    }
    failed(error);
    throw;  // `failed` must throw; should it not, the backend's error goes on
  }
}

}  // namespace quiver::runtime
