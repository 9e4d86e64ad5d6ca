// The chunk manager's state, private to chunk_manager.cpp and offload_step.cpp. The device side
// of every model state stays the trainer's bucket Buffers (bound to the budgeted pool); the host
// side is one array per chunk in the chunk plan's layout, holding host-resident weights, fp32
// masters and moments. A chunk's tensors map onto bucket ranges, so a copy is one upload or
// download per tensor.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#include "tessel/core/chunk_plan.hpp"
#include "tessel/executor/device_pool.hpp"
#include "tessel/executor/memory_ledger.hpp"
#include "tessel/executor/memory_tracer.hpp"

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

struct OffloadState {
  ChunkPlan plan;
  std::unique_ptr<DevicePool> pool;
  MemoryTracer tracer;
  std::vector<HostChunk> chunks;
  std::vector<int> layer_segment;  // by layer; -1 where another stage holds it
  int embedding_segment = -1, head_segment = -1;
  // Per bucket: whether every tensor is in a host-resident chunk (its weights leave the
  // device between uses), whether any is optimized on the host, and how many fetched
  // chunks hold its weights on the device now.
  std::vector<bool> evictable, host_optimized, device_optimized;
  std::vector<int> held;
  bool in_step = false;
  int prefetches = 0, last_prefetches = 0;  // this step's fetches issued a segment ahead
  // The pool's most (model + non-model) over the warm-up steps, where nothing is
  // prefetched: a later step without prefetches repeats it, so a prefetch fits while its
  // buffers, and those of the others issued for the same segment, fit on top of it.
  std::size_t warm_up_peak_bytes = 0;
  std::size_t prefetched_bytes = 0;  // issued ahead for the next segment, not yet its own
  int warm_up_steps_left = 2;
  double host_to_device_bytes = 0, device_to_host_bytes = 0;  // this step's, so far
  double last_host_to_device_bytes = 0, last_device_to_host_bytes = 0;
};

}  // namespace tessel::executor
