// A fake verbs provider for the RDMA transport's tests: an in-process "NIC" that serves
// RDMA READs between queue pairs of one process with memcpy, and injects what a real device
// rarely produces on demand: error completions, retries exceeded, a completion queue that
// overflows, reads that never complete. It counts live objects, so tests can check that a
// transport leaves no queue pair or registration behind.
#pragma once

#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/verbs.h"

namespace quiver::testing {

class FakeVerbs {
 public:
  enum class Fault { kNone, kRemoteAccess, kRetryExceeded, kCqOverflow, kSilent };

  static FakeVerbs& instance() {
    static FakeVerbs fake;
    return fake;
  }

  // Installs the fake as the verbs provider until the returned guard dies.
  struct Installed {
    Installed() { quiver::runtime::verbs::install(&instance().api_); }
    ~Installed() { quiver::runtime::verbs::install(nullptr); }
  };

  void set_fault(Fault fault, int after_reads = 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    fault_ = fault;
    fault_after_ = after_reads;
    reads_ = 0;
  }
  // Every GID slot reads empty (all zero), as a gid_index past the port's GIDs does.
  void set_empty_gids(bool empty) { empty_gids_ = empty; }
  int live_objects() const { return live_.load(); }
  // READ work requests posted so far (each may cover several rows).
  int reads() {
    std::lock_guard<std::mutex> lock(mutex_);
    return posted_;
  }

 private:
  struct FakeCq {
    ibv_cq cq{};
    std::deque<ibv_wc> done;
    size_t capacity = 0;
    bool overflowed = false;
  };
  struct FakeQp {
    ibv_qp qp{};
    uint32_t dest = 0;
    FakeCq* cq = nullptr;
    bool error = false;
  };
  struct FakeMr {
    ibv_mr mr{};
    int access = 0;
  };

  FakeVerbs() {
    device_ = std::make_unique<ibv_device>();
    std::strcpy(device_->name, "fake0");
    api_.get_device_list = [](int* count) {
      *count = 1;
      auto** list = new ibv_device*[2];
      list[0] = instance().device_.get();
      list[1] = nullptr;
      return list;
    };
    api_.free_device_list = [](ibv_device** list) { delete[] list; };
    api_.get_device_name = [](ibv_device* device) -> const char* { return device->name; };
    api_.open_device = [](ibv_device* device) {
      auto* context = new ibv_context{};
      context->device = device;
      ++instance().live_;
      return context;
    };
    api_.close_device = [](ibv_context* context) {
      delete context;
      --instance().live_;
      return 0;
    };
    api_.query_device = [](ibv_context*, ibv_device_attr* attr) {
      std::memset(attr, 0, sizeof(*attr));
      attr->max_qp_wr = 1024;
      attr->max_cqe = 1 << 16;
      attr->max_qp_rd_atom = 16;
      attr->max_qp_init_rd_atom = 16;
      return 0;
    };
    api_.query_port = [](ibv_context*, uint8_t, ibv_port_attr* attr) {
      std::memset(attr, 0, sizeof(*attr));
      attr->state = IBV_PORT_ACTIVE;
      attr->active_mtu = IBV_MTU_1024;
      attr->link_layer = IBV_LINK_LAYER_INFINIBAND;
      attr->lid = 7;
      attr->gid_tbl_len = 1;
      attr->max_msg_sz = 1u << 31;  // as rxe and most HCAs report
      return 0;
    };
    api_.query_gid = [](ibv_context*, uint8_t, int index, ibv_gid* gid) {
      // A link-local GID, as a port's slot holds one: an all-zero slot is an empty one,
      // which the transport refuses.
      std::memset(gid, 0, sizeof(*gid));
      if (instance().empty_gids_) return 0;
      if (index >= 3) {  // from 3 on, IPv4 ones (::ffff:10.0.0.index), as RoCE ports list
        gid->raw[10] = gid->raw[11] = 0xff;
        gid->raw[12] = 10;
        gid->raw[15] = static_cast<uint8_t>(index);
        return 0;
      }
      gid->raw[0] = 0xfe;
      gid->raw[1] = 0x80;
      gid->raw[15] = static_cast<uint8_t>(index + 1);
      return 0;
    };
    api_.alloc_pd = [](ibv_context* context) {
      auto* pd = new ibv_pd{};
      pd->context = context;
      ++instance().live_;
      return pd;
    };
    api_.dealloc_pd = [](ibv_pd* pd) {
      delete pd;
      --instance().live_;
      return 0;
    };
    api_.reg_mr = [](ibv_pd* pd, void* addr, size_t length, int access) -> ibv_mr* {
      FakeVerbs& f = instance();
      std::lock_guard<std::mutex> lock(f.mutex_);
      auto* mr = new FakeMr{};
      mr->mr.pd = pd;
      mr->mr.addr = addr;
      mr->mr.length = length;
      mr->mr.lkey = mr->mr.rkey = ++f.next_key_;
      mr->access = access;
      f.mrs_[mr->mr.rkey] = mr;
      ++f.live_;
      return &mr->mr;
    };
    api_.dereg_mr = [](ibv_mr* mr) {
      FakeVerbs& f = instance();
      std::lock_guard<std::mutex> lock(f.mutex_);
      f.mrs_.erase(mr->rkey);
      delete reinterpret_cast<FakeMr*>(mr);
      --f.live_;
      return 0;
    };
    api_.create_cq = [](ibv_context* context, int entries, void*, ibv_comp_channel*,
                        int) -> ibv_cq* {
      auto* cq = new FakeCq{};
      cq->cq.context = context;
      cq->capacity = static_cast<size_t>(entries);
      ++instance().live_;
      return &cq->cq;
    };
    api_.destroy_cq = [](ibv_cq* cq) {
      delete reinterpret_cast<FakeCq*>(cq);
      --instance().live_;
      return 0;
    };
    api_.create_qp = [](ibv_pd* pd, ibv_qp_init_attr* init) -> ibv_qp* {
      FakeVerbs& f = instance();
      std::lock_guard<std::mutex> lock(f.mutex_);
      auto* qp = new FakeQp{};
      qp->qp.pd = pd;
      qp->qp.context = pd->context;
      qp->qp.qp_num = ++f.next_qpn_;
      qp->cq = reinterpret_cast<FakeCq*>(init->send_cq);
      f.qps_[qp->qp.qp_num] = qp;
      ++f.live_;
      return &qp->qp;
    };
    api_.modify_qp = [](ibv_qp* qp, ibv_qp_attr* attr, int mask) {
      if (mask & IBV_QP_DEST_QPN) reinterpret_cast<FakeQp*>(qp)->dest = attr->dest_qp_num;
      return 0;
    };
    api_.destroy_qp = [](ibv_qp* qp) {
      FakeVerbs& f = instance();
      std::lock_guard<std::mutex> lock(f.mutex_);
      f.qps_.erase(qp->qp_num);
      delete reinterpret_cast<FakeQp*>(qp);
      --f.live_;
      return 0;
    };
    api_.post_send = [](ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
      return instance().post(reinterpret_cast<FakeQp*>(qp), wr, bad);
    };
    api_.poll_cq = [](ibv_cq* cq, int entries, ibv_wc* wc) {
      FakeVerbs& f = instance();
      std::lock_guard<std::mutex> lock(f.mutex_);
      auto* fake = reinterpret_cast<FakeCq*>(cq);
      if (fake->overflowed) return -1;
      int n = 0;
      while (n < entries && !fake->done.empty()) {
        wc[n++] = fake->done.front();
        fake->done.pop_front();
      }
      return n;
    };
    api_.wc_status_str = [](ibv_wc_status status) -> const char* {
      switch (status) {
        case IBV_WC_SUCCESS:
          return "success";
        case IBV_WC_REM_ACCESS_ERR:
          return "remote access error";
        case IBV_WC_RETRY_EXC_ERR:
          return "transport retry counter exceeded";
        case IBV_WC_WR_FLUSH_ERR:
          return "Work Request Flushed Error";
        default:
          return "other error";
      }
    };
  }

  // Serves READs at once (copying from the MR the peer queue pair's rkey names), or
  // injects the configured fault.
  int post(FakeQp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (; wr != nullptr; wr = wr->next) {
      ibv_wc wc{};
      wc.wr_id = wr->wr_id;
      wc.opcode = IBV_WC_RDMA_READ;
      wc.status = IBV_WC_SUCCESS;
      ++posted_;
      const bool faulty = fault_ != Fault::kNone && reads_++ >= fault_after_;
      if (qp->error) {
        wc.status = IBV_WC_WR_FLUSH_ERR;
      } else if (faulty && fault_ == Fault::kRemoteAccess) {
        wc.status = IBV_WC_REM_ACCESS_ERR;
      } else if (faulty && fault_ == Fault::kRetryExceeded) {
        wc.status = IBV_WC_RETRY_EXC_ERR;
      } else if (faulty && fault_ == Fault::kSilent) {
        continue;  // the read never completes
      } else {
        auto found = mrs_.find(wr->wr.rdma.rkey);
        const bool readable =
            found != mrs_.end() && (found->second->access & IBV_ACCESS_REMOTE_READ);
        const auto* base = readable ? static_cast<const char*>(found->second->mr.addr) : nullptr;
        const uint64_t offset =
            readable ? wr->wr.rdma.remote_addr - reinterpret_cast<uint64_t>(base) : 0;
        if (!readable || wr->wr.rdma.remote_addr < reinterpret_cast<uint64_t>(base) ||
            offset + wr->sg_list[0].length > found->second->mr.length) {
          wc.status = IBV_WC_REM_ACCESS_ERR;  // what a NIC answers outside a region
        } else {
          std::memcpy(reinterpret_cast<void*>(wr->sg_list[0].addr), base + offset,
                      wr->sg_list[0].length);
        }
      }
      if (wc.status != IBV_WC_SUCCESS) qp->error = true;
      // Errors complete even when unsignaled, as on a real RC queue pair.
      if ((wr->send_flags & IBV_SEND_SIGNALED) || wc.status != IBV_WC_SUCCESS) {
        if (fault_ == Fault::kCqOverflow && faulty) qp->cq->capacity = 0;
        if (qp->cq->done.size() >= qp->cq->capacity) {
          qp->cq->overflowed = true;
        } else {
          qp->cq->done.push_back(wc);
        }
      }
    }
    *bad = nullptr;
    return 0;
  }

  quiver::runtime::verbs::Api api_{};
  std::unique_ptr<ibv_device> device_;
  std::mutex mutex_;
  std::map<uint32_t, FakeMr*> mrs_;
  std::map<uint32_t, FakeQp*> qps_;
  uint32_t next_key_ = 100;
  uint32_t next_qpn_ = 10;
  Fault fault_ = Fault::kNone;
  std::atomic<bool> empty_gids_{false};
  int fault_after_ = 0;
  int reads_ = 0;
  int posted_ = 0;
  std::atomic<int> live_{0};
};

}  // namespace quiver::testing
