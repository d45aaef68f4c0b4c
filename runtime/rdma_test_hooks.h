// The RDMA transport's test hooks, kept out of the public header (quiver/transport.h): a
// transport that skips its check of requested rows against a peer's table, so that the
// NIC's own bounds check answers, or that reads with a wrong remote key. For tests only;
// not installed.
#pragma once

#include <quiver/transport.h>

namespace quiver::runtime {

struct RdmaTestHooks {
  bool unchecked = false;
  bool wrong_rkey = false;
};

// Transport::rdma with `hooks` (the same checks and errors otherwise).
c10::intrusive_ptr<Transport> rdma_with_test_hooks(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int64_t host, int64_t num_hosts,
                                                   at::Tensor table,
                                                   const Transport::RdmaOptions& options,
                                                   const RdmaTestHooks& hooks);

}  // namespace quiver::runtime
