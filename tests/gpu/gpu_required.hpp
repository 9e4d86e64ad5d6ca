// Tests that need a CUDA device begin with TESSEL_REQUIRE_GPU(): it skips with a message
// where no device is present, and FAILS where ctest runs the test without the label
// `gpu` (tessel_test(NAME GPU ...) in tests/CMakeLists.txt). gpu-check selects GPU tests
// by that label, so an unlabelled one would pass here forever and never meet a GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

#include "tessel/kernels/backend.hpp"

namespace tessel::testing {
// ctest sets TESSEL_TEST_LABELS on every test it runs (tests/CMakeLists.txt); a test
// executable run by hand has none, and is not judged.
inline bool runs_without_the_gpu_label() {
  const char* labels = std::getenv("TESSEL_TEST_LABELS");
  return labels != nullptr && std::string_view(labels).find("gpu") == std::string_view::npos;
}
}  // namespace tessel::testing

#define TESSEL_REQUIRE_GPU()                                                                                  \
  do {                                                                                                        \
    if (::tessel::testing::runs_without_the_gpu_label())                                                      \
      FAIL() << "this test needs a CUDA device, but ctest runs it without the label gpu: register its "       \
                "executable with tessel_test(NAME GPU ...) in tests/CMakeLists.txt, or gpu-check never runs it"; \
    if (::tessel::kernels::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";       \
  } while (false)
