// The chunk manager's host side (chunk_manager.hpp): one array per chunk in the chunk
// plan's layout (its tensors at their offsets), where host-resident weights, the fp32
// master weights and the moments of host-optimized chunks live. A chunk's tensors map
// onto bucket ranges (pieces), so a copy is one backend upload / download per tensor.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#include "tessel/executor/memory_ledger.hpp"

namespace tessel::executor {

// Host memory from the backend (pinned on a GPU, so copies need no staging), zeroed, and
// counted as host memory by the ledger current when it was allocated.
class HostArray {
 public:
  HostArray() = default;
  ~HostArray() { reset(); }
  HostArray(HostArray&& other) noexcept { swap(other); }
  HostArray& operator=(HostArray&& other) noexcept {
    if (this != &other) reset(), swap(other);
    return *this;
  }
  HostArray(const HostArray&) = delete;
  HostArray& operator=(const HostArray&) = delete;
  void assign(kernels::Backend& backend, std::size_t count) {
    reset();
    backend_ = &backend;
    data_ = static_cast<float*>(backend.allocate_host(std::max<std::size_t>(count, 1) * sizeof(float)));
    std::fill_n(data_, count, 0.0f);
    size_ = count;
    ledger_ = MemoryLedger::current();
    if (ledger_) ledger_->host_allocated(count * sizeof(float));
  }
  float* data() { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  void reset() {
    if (data_) backend_->deallocate_host(data_);
    if (data_ && ledger_) ledger_->host_freed(size_ * sizeof(float));
    data_ = nullptr, size_ = 0, ledger_ = nullptr;
  }
  void swap(HostArray& other) noexcept {
    std::swap(backend_, other.backend_), std::swap(data_, other.data_), std::swap(size_, other.size_);
    std::swap(ledger_, other.ledger_);
  }
  kernels::Backend* backend_ = nullptr;
  MemoryLedger* ledger_ = nullptr;
  float* data_ = nullptr;
  std::size_t size_ = 0;
};

// One tensor of a chunk: where it lies in its bucket and in the chunk.
struct ChunkPiece {
  int bucket = 0;
  std::size_t bucket_offset = 0, chunk_offset = 0, size = 0;
};

// Host memory of one chunk (capacity elements each).
struct HostChunk {
  std::vector<ChunkPiece> pieces;
  std::vector<int> buckets;  // of its pieces, once each, in order
  HostArray weights;  // host-resident or host-optimized: the fp32 master weights
  HostArray grads, moment1, moment2;  // host-optimized: owned parts only are used
  int fetched = 0;  // passes holding its weights on the device now
  std::int64_t fetched_for = -1;  // the pass (step, micro-batch, phase) of its last fetch
};

}  // namespace tessel::executor
