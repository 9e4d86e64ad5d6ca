// A machine with the CUDA toolkit must get the CUDA backend: a configure step that
// silently missed nvcc would otherwise pass every test with the GPU tests skipped.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>

#include "tessel/core/device_spec.hpp"
#include "tessel/kernels/backend.hpp"

namespace {

// Where nvcc is: the toolkit's usual place, else the first directory on PATH with one.
std::optional<std::filesystem::path> find_nvcc() {
  namespace fs = std::filesystem;
  const fs::path usual = "/usr/local/cuda/bin/nvcc";
  std::error_code error;
  if (fs::exists(usual, error)) return usual;
  const char* path = std::getenv("PATH");
  if (!path) return std::nullopt;
  std::istringstream directories(path);
  std::string directory;
  while (std::getline(directories, directory, ':')) {
    if (directory.empty()) continue;
    const fs::path candidate = fs::path(directory) / "nvcc";
    if (fs::is_regular_file(candidate, error)) return candidate;
  }
  return std::nullopt;
}

}  // namespace

TEST(Build, CudaBackendWhereTheToolkitIs) {
#ifdef TESSEL_CUDA_DISABLED
  GTEST_SKIP() << "configured with TESSEL_WITH_CUDA=OFF: a build without the CUDA backend is what was asked for";
#endif
  const auto nvcc = find_nvcc();
  if (!nvcc) {
    GTEST_SKIP() << "no nvcc on this machine: a build without the CUDA backend is right here";
  }
  EXPECT_TRUE(tessel::kernels::cuda_backend_built())
      << "nvcc is at " << nvcc->string()
      << " but this build has no CUDA backend: configure with -DCMAKE_CUDA_COMPILER=" << nvcc->string();
}

// A CPU rank of a build that links the CUDA libraries holds them in memory whether it
// uses them or not, and the memory prediction counts them exactly then (issue 38: a
// build without them was predicted 150 MiB per rank too much).
TEST(Build, TheRuntimePredictionCountsTheCudaLibrariesExactlyWhereTheyAreLinked) {
  EXPECT_EQ(tessel::build_links_cuda_libraries(), tessel::kernels::cuda_backend_built());
}
