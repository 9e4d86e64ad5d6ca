// The chunk manager's state, private to the trainer's offload files (chunk_manager.cpp,
// offload_step.cpp). The device side of every model state stays the trainer's bucket
// Buffers (bound to the budgeted pool, so their bytes count against the budget); the
// host side is one array per chunk in the chunk plan's layout (its tensors at their
// offsets), which is where host-resident weights, the fp32 master weights and the moments
// of host-optimized chunks live. A chunk's tensors map onto bucket ranges (pieces), so a
// copy is one backend upload / download per tensor (or per owned part of one).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "tessel/core/chunk_plan.hpp"
#include "tessel/executor/device_pool.hpp"
#include "tessel/executor/memory_tracer.hpp"

namespace tessel::executor {

// One tensor of a chunk: where it lies in its bucket and in the chunk.
struct ChunkPiece {
  int bucket = 0;
  std::size_t bucket_offset = 0, chunk_offset = 0, size = 0;
};

// Host memory of one chunk (capacity elements each; on a GPU these would be pinned).
struct HostChunk {
  std::vector<ChunkPiece> pieces;
  std::vector<float> weights;  // host-resident or host-optimized: the fp32 master weights
  std::vector<float> grads, moment1, moment2;  // host-optimized: owned parts only are used
  int fetched = 0;  // passes holding its weights on the device now
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
  double host_to_device_bytes = 0, device_to_host_bytes = 0;  // this step's, so far
  double last_host_to_device_bytes = 0, last_device_to_host_bytes = 0;
};

}  // namespace tessel::executor
