// The CUDA backend's parts that need no device: the factory's errors on any machine, and
// in CUDA builds the column-sum chunking. Its ops on a
// device are cuda_backend_device_test.cpp (label gpu); its allocator's policy is
// block_cache_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tessel/core/error.hpp"
#include "tessel/kernels/backend.hpp"

#if defined(TESSEL_CUDA_BUILT)
#include "column_chunks.hpp"
#include "cuda_backend_impl.hpp"
#include "tessel/kernels/cuda/cuda_backend.hpp"
#endif

using namespace tessel;
using namespace tessel::kernels;

namespace {

constexpr Stream kCompute = Stream::compute;

TEST(CudaBackend, FactoryNamesTheMissingDeviceAndHowManyThereAre) {
  const int count = cuda_device_count();
  ASSERT_GE(count, 0);
  try {
    make_cuda_backend(count);
    FAIL() << "make_cuda_backend(" << count << ") made a backend for a device that does not exist";
  } catch (const Error& error) {
    const std::string message = error.what();
    if (cuda_backend_built()) {
      EXPECT_NE(message.find("device " + std::to_string(count)), std::string::npos) << message;
      EXPECT_NE(message.find("sees " + std::to_string(count)), std::string::npos) << message;
    } else {
      EXPECT_NE(message.find("no CUDA backend"), std::string::npos) << message;
    }
  }
  if (cuda_backend_built()) {
    EXPECT_THROW(make_cuda_backend(-1), Error);
  }
}

#if defined(TESSEL_CUDA_BUILT)
TEST(CudaBackend, ColumnSumChunksCoverEveryRowOnceWithNoneEmpty) {
  using cuda::column_chunks;
  for (int rows : {1, 2, 31, 32, 33, 100, 1000, 2047, 2048, 2049, 4097, 100003}) {
    const auto chunks = column_chunks(rows);
    EXPECT_GE(chunks.count, 1) << rows;
    EXPECT_LE(chunks.count, cuda::kMaxChunks) << rows;
    EXPECT_GE(std::int64_t(chunks.count) * chunks.rows_each, rows) << rows << " rows are not all covered";
    EXPECT_LT(std::int64_t(chunks.count - 1) * chunks.rows_each, rows) << rows << " rows leave the last chunk empty";
    if (rows >= cuda::kMinChunkRows) {
      EXPECT_GE(chunks.rows_each, cuda::kMinChunkRows) << rows;
    }
  }
  EXPECT_EQ(column_chunks(1000).count, 31);  // 30 chunks of 33 rows and one of 10
  EXPECT_EQ(column_chunks(1000).rows_each, 33);
  EXPECT_EQ(cuda::column_scratch_bytes(1000, 300, 2), std::size_t(31) * 300 * 2 * sizeof(float));
  EXPECT_EQ(cuda::column_scratch_bytes(0, 300, 1), std::size_t(300) * sizeof(float));
}

TEST(CudaBackend, NativeStreamOfANonCudaBackendIsAnError) {
  EXPECT_THROW(cuda::native_stream(cpu_backend(), kCompute), Error);
  EXPECT_THROW(cuda::device_of(cpu_backend()), Error);
}
#endif

}  // namespace
