// Registration of the runtime classes (torch.classes.quiver.*), called by the registrar
// (library.cpp) before it declares the op schemas that may name them.
#pragma once

#include <torch/library.h>

namespace quiver::runtime {

void register_runtime_classes(torch::Library& m);

}  // namespace quiver::runtime
