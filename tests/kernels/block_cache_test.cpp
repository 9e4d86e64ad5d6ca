// The CUDA backend's block cache (kernels/src/memory/block_cache.hpp) on a fake device
// whose fences pass only when the test says so: a freed block is not handed out again
// while work queued before its free may still use it, comes back once its fence passed,
// and a full device first gets back the cached blocks, waiting for their fences.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "memory/block_cache.hpp"
#include "tessel/core/error.hpp"

using namespace tessel;
using namespace tessel::kernels;

namespace {

// A device with `capacity` bytes; fence n passes once `done` reaches n (what the streams
// would have finished); wait() moves `done` to the fence, as a synchronise would.
class FakeDevice : public BlockDevice {
 public:
  explicit FakeDevice(std::size_t capacity) : capacity_(capacity) {}
  void* allocate(std::size_t bytes) override {
    if (in_use_ + bytes > capacity_) return nullptr;
    in_use_ += bytes;
    void* block = reinterpret_cast<void*>(next_address_);
    next_address_ += bytes + 4096;
    sizes_[block] = bytes;
    ++allocations;
    return block;
  }
  void release(void* block) override {
    in_use_ -= sizes_.at(block);
    sizes_.erase(block);
    ++releases;
  }
  std::uint64_t record_fence() override {
    pending_.insert(++recorded_);
    return recorded_;
  }
  bool passed(std::uint64_t fence) override { return fence <= done; }
  void wait(std::uint64_t fence) override {
    done = std::max(done, fence);
    ++waits;
  }
  void forget(std::uint64_t fence) override { pending_.erase(fence); }

  std::uint64_t done = 0;
  int allocations = 0, releases = 0, waits = 0;
  std::size_t blocks() const { return sizes_.size(); }
  std::size_t fences_remembered() const { return pending_.size(); }
  std::uint64_t last_fence() const { return recorded_; }

 private:
  std::size_t capacity_, in_use_ = 0;
  std::uintptr_t next_address_ = 0x10000;
  std::map<void*, std::size_t> sizes_;
  std::set<std::uint64_t> pending_;
  std::uint64_t recorded_ = 0;
};

TEST(BlockCache, RoundsToSizeClasses) {
  EXPECT_EQ(BlockCache::rounded_bytes(0), 512u);
  EXPECT_EQ(BlockCache::rounded_bytes(1), 512u);
  EXPECT_EQ(BlockCache::rounded_bytes(513), 1024u);
  EXPECT_EQ(BlockCache::rounded_bytes(std::size_t(1) << 20), std::size_t(1) << 20);
  EXPECT_EQ(BlockCache::rounded_bytes((std::size_t(1) << 20) + 1), std::size_t(2) << 20);
  EXPECT_EQ(BlockCache::rounded_bytes((std::size_t(3) << 20) - 5), std::size_t(4) << 20);
}

TEST(BlockCache, AFreedBlockWaitsForItsFenceBeforeItIsHandedOutAgain) {
  FakeDevice device(std::size_t(1) << 30);
  BlockCache cache(device);
  void* first = cache.allocate(1000);
  cache.deallocate(first);  // work queued before this may still read it
  void* second = cache.allocate(1000);
  EXPECT_NE(second, first) << "a block was reused while its free's fence was pending";
  EXPECT_EQ(device.allocations, 2);
  device.done = device.last_fence();  // the streams passed the free
  cache.deallocate(second);
  device.done = device.last_fence();
  void* third = cache.allocate(1000);
  EXPECT_EQ(third, first) << "the oldest free whose fence passed comes back first";
  EXPECT_EQ(device.allocations, 2) << "no new memory once a cached block is free to use";
  EXPECT_EQ(cache.allocate(1000), second);
  EXPECT_EQ(device.allocations, 2);
  EXPECT_EQ(device.fences_remembered(), 0u) << "a reused block's fence is forgotten";
}

TEST(BlockCache, OnlyTheSameSizeClassIsReused) {
  FakeDevice device(std::size_t(1) << 30);
  BlockCache cache(device);
  void* small = cache.allocate(600);
  cache.deallocate(small);
  device.done = device.last_fence();
  void* large = cache.allocate(5000);
  EXPECT_NE(large, small);
  EXPECT_EQ(cache.allocate(1000), small) << "600 and 1000 bytes are one 1024-byte class";
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_EQ(cache.live_bytes(), 1024u + 5120u);
}

TEST(BlockCache, AFullDeviceGetsCachedBlocksBackWaitingForTheirFences) {
  const std::size_t mib = std::size_t(1) << 20;
  FakeDevice device(8 * mib);
  BlockCache cache(device);
  void* a = cache.allocate(4 * mib);
  void* b = cache.allocate(2 * mib);
  cache.deallocate(a);
  cache.deallocate(b);
  device.done = 1;  // a's fence passed, b's not
  // 6 MiB does not fit beside the 6 MiB cached: a goes back first (its fence passed, no
  // wait), which frees enough.
  void* c = cache.allocate(6 * mib);
  EXPECT_NE(c, nullptr);
  EXPECT_EQ(device.waits, 0);
  EXPECT_EQ(device.releases, 1);
  EXPECT_EQ(cache.cached_bytes(), 2 * mib);
  // Now 2 MiB cached (b, pending) and 6 MiB live: 2 MiB more fits only after waiting for b.
  cache.deallocate(c);
  device.done = device.last_fence() - 1;  // c's fence pending too
  void* d = cache.allocate(8 * mib);
  EXPECT_NE(d, nullptr);
  EXPECT_GE(device.waits, 1) << "the cache waited for the pending fences before it gave up";
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_EQ(cache.peak_reserved_bytes(), 8 * mib);
  EXPECT_THROW(cache.allocate(1), Error) << "a full device with nothing cached refuses in one error";
  cache.deallocate(d);
}

TEST(BlockCache, GivesEveryBlockBackAndRefusesForeignPointers) {
  FakeDevice device(std::size_t(1) << 30);
  {
    BlockCache cache(device);
    void* kept = cache.allocate(100);
    void* freed = cache.allocate(100);
    cache.deallocate(freed);
    int unrelated = 0;
    EXPECT_THROW(cache.deallocate(&unrelated), Error);
    cache.deallocate(nullptr);  // nothing happens
    (void)kept;
  }
  EXPECT_EQ(device.blocks(), 0u) << "the cache's end returns live and cached blocks alike";
  EXPECT_EQ(device.fences_remembered(), 0u);
}

}  // namespace
