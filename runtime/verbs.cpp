#include "runtime/verbs.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "runtime/dynamic_library.h"

namespace quiver::runtime::verbs {
namespace {

// The exported query_port fills the older, shorter attribute struct; providers with an
// extended context give the full one. The header does this in an inline function whose
// fallback names the exported symbol, which this library must not link; so it is done
// here with the loaded symbol.
int (*exported_query_port)(ibv_context*, uint8_t, _compat_ibv_port_attr*) = nullptr;

int query_port(ibv_context* context, uint8_t port, ibv_port_attr* attr) {
  verbs_context* extended = verbs_get_ctx_op(context, query_port);
  if (extended != nullptr) return extended->query_port(context, port, attr, sizeof(*attr));
  std::memset(attr, 0, sizeof(*attr));
  return exported_query_port(context, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

// Data-path calls go through the provider's ops, as the header's inline functions do.
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  return qp->context->ops.post_send(qp, wr, bad);
}
int poll_cq(ibv_cq* cq, int entries, ibv_wc* wc) {
  return cq->context->ops.poll_cq(cq, entries, wc);
}

struct Loaded {
  Api api{};
  std::string error;  // empty when loaded
};

const Loaded& loaded() {
  static const Loaded result = [] {
    Loaded l;
    void* library = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      l.error = std::string("libibverbs.so.1 could not be loaded (") + dlerror() +
                "): install rdma-core (Debian: ibverbs-providers libibverbs1) to use RDMA";
      return l;
    }
    std::string missing;
    bind_symbol(library, "ibv_get_device_list", l.api.get_device_list, missing);
    bind_symbol(library, "ibv_free_device_list", l.api.free_device_list, missing);
    bind_symbol(library, "ibv_get_device_name", l.api.get_device_name, missing);
    bind_symbol(library, "ibv_open_device", l.api.open_device, missing);
    bind_symbol(library, "ibv_close_device", l.api.close_device, missing);
    bind_symbol(library, "ibv_query_device", l.api.query_device, missing);
    bind_symbol(library, "ibv_query_port", exported_query_port, missing);
    bind_symbol(library, "ibv_query_gid", l.api.query_gid, missing);
    bind_symbol(library, "ibv_alloc_pd", l.api.alloc_pd, missing);
    bind_symbol(library, "ibv_dealloc_pd", l.api.dealloc_pd, missing);
    bind_symbol(library, "ibv_reg_mr", l.api.reg_mr, missing);
    bind_symbol(library, "ibv_dereg_mr", l.api.dereg_mr, missing);
    bind_symbol(library, "ibv_create_cq", l.api.create_cq, missing);
    bind_symbol(library, "ibv_destroy_cq", l.api.destroy_cq, missing);
    bind_symbol(library, "ibv_create_qp", l.api.create_qp, missing);
    bind_symbol(library, "ibv_modify_qp", l.api.modify_qp, missing);
    bind_symbol(library, "ibv_destroy_qp", l.api.destroy_qp, missing);
    bind_symbol(library, "ibv_wc_status_str", l.api.wc_status_str, missing);
    l.api.query_port = &query_port;
    l.api.post_send = &post_send;
    l.api.poll_cq = &poll_cq;
    if (!missing.empty()) l.error = "libibverbs.so.1 lacks " + missing;
    return l;
  }();
  return result;
}

std::atomic<const Api*> fake{nullptr};

}  // namespace

const Api& api() {
  if (const Api* installed = fake.load()) return *installed;
  const Loaded& l = loaded();
  if (!l.error.empty()) throw std::runtime_error(l.error);
  return l.api;
}

void install(const Api* provider) { fake.store(provider); }

bool device_present() {
  try {
    int count = 0;
    ibv_device** list = api().get_device_list(&count);
    if (list != nullptr) api().free_device_list(list);
    return count > 0;
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<std::string> device_names() {
  std::vector<std::string> names;
  try {
    int count = 0;
    ibv_device** list = api().get_device_list(&count);
    for (int k = 0; list != nullptr && k < count; ++k) {
      names.emplace_back(api().get_device_name(list[k]));
    }
    if (list != nullptr) api().free_device_list(list);
  } catch (const std::exception&) {
    names.clear();  // libibverbs does not load: no devices
  }
  return names;
}

Context open_device(const std::string& name) {
  int count = 0;
  ibv_device** list = api().get_device_list(&count);
  if (list == nullptr || count == 0) {
    if (list != nullptr) api().free_device_list(list);
    throw std::runtime_error("no RDMA device found (ibv_get_device_list listed none)");
  }
  ibv_device* chosen = nullptr;
  std::string seen;
  for (int k = 0; k < count; ++k) {
    const std::string device = api().get_device_name(list[k]);
    seen += (seen.empty() ? "" : ", ") + device;
    if (chosen == nullptr && (name.empty() || device == name)) chosen = list[k];
  }
  ibv_context* context = chosen ? api().open_device(chosen) : nullptr;
  api().free_device_list(list);
  if (chosen == nullptr) {
    throw std::runtime_error("no RDMA device named '" + name + "' (devices: " + seen + ")");
  }
  if (context == nullptr) throw std::runtime_error("ibv_open_device failed for " + name);
  return Context(context);
}

}  // namespace quiver::runtime::verbs
