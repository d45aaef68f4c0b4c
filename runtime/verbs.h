// rdma-core verbs, reached through a table of function pointers that is filled at first
// use by dlopen("libibverbs.so.1"), so the library loads and runs on machines without
// rdma-core or an RDMA device (only an RDMA transport then refuses, in a sentence). Tests
// swap in a fake provider (install_verbs) to produce what a real device rarely does:
// completion errors, retries exceeded, a full completion queue.
//
// Every verbs object has an owner below (RAII): a transport that fails half-built, or dies,
// leaves no queue pair, memory registration or protection domain behind.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace quiver::runtime::verbs {

struct Api {
  ibv_device** (*get_device_list)(int* count);
  void (*free_device_list)(ibv_device** list);
  const char* (*get_device_name)(ibv_device* device);
  ibv_context* (*open_device)(ibv_device* device);
  int (*close_device)(ibv_context* context);
  int (*query_device)(ibv_context* context, ibv_device_attr* attr);
  int (*query_port)(ibv_context* context, uint8_t port, ibv_port_attr* attr);
  int (*query_gid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid);
  ibv_pd* (*alloc_pd)(ibv_context* context);
  int (*dealloc_pd)(ibv_pd* pd);
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access);
  int (*dereg_mr)(ibv_mr* mr);
  ibv_cq* (*create_cq)(ibv_context* context, int entries, void* user, ibv_comp_channel* channel,
                       int vector);
  int (*destroy_cq)(ibv_cq* cq);
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr);
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int mask);
  int (*destroy_qp)(ibv_qp* qp);
  int (*post_send)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
  int (*poll_cq)(ibv_cq* cq, int entries, ibv_wc* wc);
  const char* (*wc_status_str)(ibv_wc_status status);
};

// The table in use: the fake one a test installed, else libibverbs (loaded at the first
// call). Throws std::runtime_error explaining what is missing.
const Api& api();
// Whether libibverbs can be loaded and lists at least one device (never throws).
bool device_present();
// The names of the RDMA devices libibverbs lists (none when it cannot load).
std::vector<std::string> device_names();
// Installs a fake provider (nullptr: back to libibverbs). For tests only.
void install(const Api* fake);

// The device context, opened by name ("" = the first device).
struct ContextDeleter {
  void operator()(ibv_context* c) const { api().close_device(c); }
};
struct PdDeleter {
  void operator()(ibv_pd* p) const { api().dealloc_pd(p); }
};
struct MrDeleter {
  void operator()(ibv_mr* m) const { api().dereg_mr(m); }
};
struct CqDeleter {
  void operator()(ibv_cq* c) const { api().destroy_cq(c); }
};
struct QpDeleter {
  void operator()(ibv_qp* q) const { api().destroy_qp(q); }
};
using Context = std::unique_ptr<ibv_context, ContextDeleter>;
using Pd = std::unique_ptr<ibv_pd, PdDeleter>;
using Mr = std::unique_ptr<ibv_mr, MrDeleter>;
using Cq = std::unique_ptr<ibv_cq, CqDeleter>;
using Qp = std::unique_ptr<ibv_qp, QpDeleter>;

Context open_device(const std::string& name);

}  // namespace quiver::runtime::verbs
