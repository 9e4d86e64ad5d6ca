// Device memory kept by size class and safe across streams: after the first step nothing
// reaches cudaMalloc (which synchronises the device). A freed block is handed out again only
// after a fence recorded at its free (an event per stream) has passed; out of memory waits for
// the oldest fences and returns cached blocks. Plain C++ over a BlockDevice, tested on the CPU
// with a fake device (tests/kernels/block_cache_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>

namespace tessel::kernels {

// What the cache needs of a device. Fences are ids the device hands out.
class BlockDevice {
 public:
  virtual ~BlockDevice() = default;
  virtual void* allocate(std::size_t bytes) = 0;  // nullptr when the device is out of memory
  virtual void release(void* block) = 0;
  virtual std::uint64_t record_fence() = 0;  // passed once every stream's work so far is done
  virtual bool passed(std::uint64_t fence) = 0;  // without waiting
  virtual void wait(std::uint64_t fence) = 0;
  virtual void forget(std::uint64_t fence) = 0;  // never asked about again
};

class BlockCache {
 public:
  explicit BlockCache(BlockDevice& device) : device_(device) {}
  ~BlockCache();  // gives every block back (the caller has synchronised)
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // Throws tessel::Error naming the size and what is in use when the device has no room.
  void* allocate(std::size_t bytes);
  void deallocate(void* pointer);

  std::size_t cached_bytes() const { return cached_bytes_; }
  std::size_t live_bytes() const { return live_bytes_; }
  // The most ever held from the device at once (live + cached).
  std::size_t peak_reserved_bytes() const { return peak_reserved_bytes_; }
  // Blocks up to 1 MiB in steps of 512 bytes, larger ones in steps of 2 MiB.
  static std::size_t rounded_bytes(std::size_t bytes);

 private:
  struct Freed {
    void* block;
    std::uint64_t fence;
  };
  void* reuse(std::size_t rounded);       // a cached block whose fence passed, or null
  bool give_back_cached(bool wait_for_all);  // releases cached blocks; true if any went

  BlockDevice& device_;
  std::mutex mutex_;
  std::map<std::size_t, std::deque<Freed>> free_;  // rounded size -> blocks, oldest free first
  std::map<void*, std::size_t> live_;              // block -> rounded size
  std::size_t cached_bytes_ = 0, live_bytes_ = 0, peak_reserved_bytes_ = 0;
};

}  // namespace tessel::kernels
