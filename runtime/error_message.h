// An exception's words for a person, where a runtime thread hands an error on as text (a
// failed request's answer, a broken channel's reason, a message to the peers).
#pragma once

#include <c10/util/Exception.h>

#include <exception>

namespace quiver::runtime {

// A c10::Error's message without the C++ frames its what() carries: source paths and load
// addresses are not for users (an HTTP client of the serving endpoint was sent them; a probe).
inline const char* message_of(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  return c10_error != nullptr ? c10_error->what_without_backtrace() : error.what();
}

}  // namespace quiver::runtime
