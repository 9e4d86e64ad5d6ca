// The stream-safe block cache's policy (block_cache.hpp says why it is built this way).
#include "block_cache.hpp"

#include <algorithm>
#include <string>

#include "tessel/core/error.hpp"

namespace tessel::kernels {

namespace {
constexpr std::size_t kSmallLimitBytes = std::size_t(1) << 20;
constexpr std::size_t kSmallStepBytes = 512;
constexpr std::size_t kLargeStepBytes = std::size_t(2) << 20;
std::size_t round_up(std::size_t bytes, std::size_t step) { return (bytes + step - 1) / step * step; }
}  // namespace

std::size_t BlockCache::rounded_bytes(std::size_t bytes) {
  if (bytes <= kSmallLimitBytes) return bytes == 0 ? kSmallStepBytes : round_up(bytes, kSmallStepBytes);
  return round_up(bytes, kLargeStepBytes);
}

BlockCache::~BlockCache() {
  for (auto& [bytes, blocks] : free_) {
    for (const Freed& freed : blocks) {
      device_.forget(freed.fence);
      device_.release(freed.block);
    }
  }
  for (const auto& [block, bytes] : live_) device_.release(block);
}

void* BlockCache::reuse(std::size_t rounded) {
  const auto blocks = free_.find(rounded);
  if (blocks == free_.end() || blocks->second.empty()) return nullptr;
  // Fences pass in the order they were recorded: the oldest free is the likeliest done.
  Freed& oldest = blocks->second.front();
  if (!device_.passed(oldest.fence)) return nullptr;
  void* block = oldest.block;
  device_.forget(oldest.fence);
  blocks->second.pop_front();
  cached_bytes_ -= rounded;
  return block;
}

bool BlockCache::give_back_cached(bool wait_for_all) {
  bool released = false;
  for (auto& [bytes, blocks] : free_) {
    while (!blocks.empty()) {
      Freed& freed = blocks.front();
      if (!device_.passed(freed.fence)) {
        if (!wait_for_all) break;
        device_.wait(freed.fence);
      }
      device_.forget(freed.fence);
      device_.release(freed.block);
      cached_bytes_ -= bytes;
      blocks.pop_front();
      released = true;
    }
  }
  return released;
}

void* BlockCache::allocate(std::size_t bytes) {
  const std::size_t rounded = rounded_bytes(bytes);
  std::lock_guard lock(mutex_);
  void* block = reuse(rounded);
  if (!block) block = device_.allocate(rounded);
  // Out of room: give back the cached blocks that are done, then wait for the rest.
  if (!block && give_back_cached(false)) block = device_.allocate(rounded);
  if (!block && give_back_cached(true)) block = device_.allocate(rounded);
  if (!block) {
    throw Error("cuda: cannot allocate " + std::to_string(rounded) + " bytes (" + std::to_string(live_bytes_) +
                " bytes in use, none cached): the device is out of memory");
  }
  live_.emplace(block, rounded);
  live_bytes_ += rounded;
  peak_reserved_bytes_ = std::max(peak_reserved_bytes_, live_bytes_ + cached_bytes_);
  return block;
}

void BlockCache::deallocate(void* pointer) {
  if (pointer == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto live = live_.find(pointer);
  if (live == live_.end()) throw Error("cuda: deallocate of a pointer this allocator did not hand out");
  const std::size_t rounded = live->second;
  free_[rounded].push_back(Freed{pointer, device_.record_fence()});
  cached_bytes_ += rounded;
  live_bytes_ -= rounded;
  live_.erase(live);
}

}  // namespace tessel::kernels
