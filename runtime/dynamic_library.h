// Binding a shared library's C functions at run time (dlopen'ed by the caller), so that the
// library builds and loads where the dependency is absent (libibverbs, NCCL's own copy):
// each missing symbol is named in `missing` instead of failing the load.
#pragma once

#include <dlfcn.h>

#include <string>

namespace quiver::runtime {

template <typename Fn>
void bind_symbol(void* library, const char* name, Fn*& slot, std::string& missing) {
  slot = reinterpret_cast<Fn*>(dlsym(library, name));
  if (slot == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
}

}  // namespace quiver::runtime
