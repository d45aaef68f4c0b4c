// A buffer kept across calls: the first `elements` of `buffer` (a 1-D tensor), reallocated
// with `options` only when it is too short, and then a quarter larger than asked, so that
// batches of varying size settle on one allocation (and its page faults are paid once).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>

namespace quiver::runtime {

inline at::Tensor kept_prefix(at::Tensor& buffer, int64_t elements,
                              const at::TensorOptions& options) {
  if (!buffer.defined() || buffer.numel() < elements) {
    buffer = at::empty({std::max<int64_t>(elements + elements / 4, 1)}, options);
  }
  return buffer.narrow(0, 0, elements);
}

}  // namespace quiver::runtime
