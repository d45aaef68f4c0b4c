// The Transport shell (quiver/transport.h): the hosts it connects, its agreements through
// their store, and the one fetch that reads (RDMA) or exchanges (collectives). The
// protocols live in rdma_transport.cpp, collective_transport.cpp and slot_exchange.cpp.
#include <c10/util/Exception.h>
#include <quiver/transport.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "runtime/host_agreement.h"

namespace quiver::runtime {

Transport::Transport(Parts parts) : parts_(std::move(parts)) {
  TORCH_CHECK((parts_.reader == nullptr) != (parts_.exchange == nullptr),
              "a transport moves rows with a reader or with an exchange");
}

std::vector<at::Tensor> Transport::fetch(const std::vector<at::Tensor>& requests,
                                         LocalRows& mine, const at::Device& device, int64_t tag) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(requests.size()) == num_hosts(),
                    "fetch needs one request per host (", num_hosts(), "), got ",
                    requests.size());
  if (parts_.reader) return parts_.reader->read(requests, mine.empty_rows(), device);
  return parts_.exchange->exchange(requests, mine, device, tag);
}

std::vector<std::string> Transport::agree(const std::string& topic, const std::string& mine,
                                          int64_t* round) {
  return agree_among_hosts(*parts_.store, topic, host(), num_hosts(), mine, parts_.timeout,
                           round);
}

std::vector<std::string> Transport::agree_over(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                               const std::string& topic,
                                               const std::string& mine, double timeout_s) {
  TORCH_CHECK_VALUE(group, "Transport.agree needs a process group");
  return agree_among_hosts(*group->getStore(), topic, group->getRank(), group->getSize(), mine,
                           checked_timeout(timeout_s, "timeout"));
}

void Transport::tell_over(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                          const std::string& topic, const std::string& mine,
                          double timeout_s) {
  TORCH_CHECK_VALUE(group, "Transport.tell needs a process group");
  tell_hosts(*group->getStore(), topic, group->getRank(), group->getSize(), mine,
             checked_timeout(timeout_s, "timeout"));
}

void Transport::check_rdma_options(int64_t port, int64_t gid_index, int64_t qps_per_peer,
                                   int64_t staging_bytes) {
  TORCH_CHECK_VALUE(qps_per_peer >= 1 && qps_per_peer <= kMaxQpsPerPeer,
                    "qps_per_peer must be in [1, ", kMaxQpsPerPeer, "], got ", qps_per_peer);
  TORCH_CHECK_VALUE(port >= 1 && port <= 255, "port must be in [1, 255], got ", port);
  TORCH_CHECK_VALUE(gid_index >= -1 && gid_index <= 255,
                    "gid_index must be -1 (pick RoCE v2 over IPv4) or in [0, 255], got ",
                    gid_index);
  TORCH_CHECK_VALUE(staging_bytes >= 0 && staging_bytes <= kMaxStagingBytes,
                    "staging_bytes must be in [0, ", kMaxStagingBytes,
                    "] (reads land in it slice after slice: a larger buffer gains nothing), got ",
                    staging_bytes);
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

}  // namespace quiver::runtime
