// Plain C++: pinning host memory in place, without torch in the way.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <stdexcept>
#include <vector>

#include "runtime/host_registration.h"

namespace {

using quiver::runtime::HostRegistration;
using quiver::runtime::is_page_locked;

TEST(HostRegistration, PinsAndUnpinsInPlace) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  std::vector<char> memory(4 << 20);
  EXPECT_FALSE(is_page_locked(memory.data()));
  {
    HostRegistration pin(memory.data(), memory.size());
    EXPECT_TRUE(is_page_locked(memory.data()));
    EXPECT_EQ(pin.bytes(), memory.size());
  }
  EXPECT_FALSE(is_page_locked(memory.data()));
}

TEST(HostRegistration, ExplainsWhyItCannotPin) {
  std::vector<char> memory(1 << 16);
  if (torch::cuda::is_available()) {
    HostRegistration first(memory.data(), memory.size());
    EXPECT_THROW(HostRegistration(memory.data(), memory.size()), std::runtime_error);
  } else {
    try {
      HostRegistration pin(memory.data(), memory.size());
      FAIL() << "pinning without a GPU must throw";
    } catch (const std::runtime_error& error) {
      EXPECT_NE(std::string(error.what()).find("GPU"), std::string::npos) << error.what();
    }
  }
}

}  // namespace
