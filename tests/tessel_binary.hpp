// The tessel binary a test runs (TESSEL_BINARY_NAME: tessel, or tessel-field in a field
// build): the one beside the test's own executable (bin/ of its build folder), found at
// run time so that no test object depends on its build folder and a second build
// (scripts/test_without_cuda.sh) takes them from ccache.
#pragma once

#include <filesystem>
#include <string>

namespace tessel_test {

inline const char* tessel_binary() {
  static const std::string path =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / TESSEL_BINARY_NAME).string();
  return path.c_str();
}

}  // namespace tessel_test

#define TESSEL_BINARY ::tessel_test::tessel_binary()
