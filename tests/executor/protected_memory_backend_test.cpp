// The fake device itself: its memory is closed to the host outside ops (a host write
// dies), open to every op, and its copies refuse a host pointer where device memory
// belongs (as a GPU's would fail), so device_check's bit-identical runs prove something.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tessel/core/error.hpp"
#include "tessel/executor/buffer.hpp"
#include "protected_memory_backend.hpp"

using tessel::kernels::ProtectedMemoryBackend;

TEST(ProtectedMemory, AHostWriteOutsideAnOpDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ProtectedMemoryBackend backend;
  auto* values = static_cast<volatile float*>(backend.allocate(64));
  EXPECT_DEATH(values[0] = 1.0f, "");
  EXPECT_DEATH((void)(values[3] + 1.0f), "");
  backend.deallocate(const_cast<float*>(values));
}

TEST(ProtectedMemory, OpsUploadsAndDownloadsSeeTheMemory) {
  ProtectedMemoryBackend backend;
  EXPECT_FALSE(backend.host_memory());
  tessel::executor::Buffer x(backend, tessel::kernels::DType::f32);
  x.upload(std::vector<float>{1, 2, 3});
  backend.scale(tessel::Stream::compute, x.ref(), 3, 2.0f);
  tessel::executor::Buffer y(backend, tessel::kernels::DType::bf16);
  y.resize(3);
  backend.convert(tessel::Stream::compute, y.ref(), x.cref(), 3);
  EXPECT_EQ(y.download(), (std::vector<float>{2, 4, 6}));
  EXPECT_TRUE(backend.owns(x.data(), x.bytes()));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(x.data()) % 4096, 0u);
}

TEST(ProtectedMemory, CopiesRefuseHostMemoryWhereDeviceMemoryBelongs) {
  ProtectedMemoryBackend backend;
  void* device = backend.allocate(16);
  float host[4] = {1, 2, 3, 4};
  EXPECT_THROW(backend.upload(tessel::Stream::compute, host, device, 16), tessel::Error);
  EXPECT_THROW(backend.download(tessel::Stream::compute, device, host, 16), tessel::Error);
  EXPECT_THROW(backend.copy(tessel::Stream::compute, host, device, 16), tessel::Error);
  EXPECT_NO_THROW(backend.upload(tessel::Stream::compute, device, host, 16));
  backend.deallocate(device);
  // A freed block of the same size comes back (the arena does not grow step by step).
  EXPECT_EQ(backend.allocate(16), device);
}
