// A fake cuDNN backend API for the tests of cudnn_api.cpp and cudnn_sdpa.cpp: it keeps
// every descriptor, checks each call against the API's rules as cuDNN's reference states
// them (listed below), records every broken rule in `violations` and answers it with an
// error status. Knobs set the version, the heuristics' answer and failures to inject.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cudnn_api.hpp"

// The rules: the attribute's type and element count per descriptor type, referenced
// descriptors finalized and of the right kind, required attributes present at finalize,
// tensor strides that fit their dims, one producer per virtual tensor and unique uids in
// an operation graph, a variant pack naming exactly the graph's non-virtual tensors.

namespace tessel::kernels::cuda::fake {

struct Value {
  int type = 0;
  std::int64_t count = 0;
  std::vector<std::int64_t> ints;  // int64, enum and boolean values
  std::vector<void*> pointers;     // descriptors, handles, void pointers
  float number = 0.0f;
};

struct Descriptor {
  int type = 0;
  bool finalized = false, destroyed = false;
  std::map<int, Value> attributes;
  std::set<std::int64_t> graph_uids;  // operation graph, config, plan: its non-virtual tensors
  std::int64_t engine = -1;           // config and engine: which heuristics answer
};

class FakeCudnn {
 public:
  FakeCudnn();  // becomes the one the Api's functions call
  ~FakeCudnn();
  FakeCudnn(const FakeCudnn&) = delete;
  FakeCudnn& operator=(const FakeCudnn&) = delete;

  cudnn::Api api() const;

  // Knobs.
  std::size_t version = 91900;
  cudnn::Status create_status = 0;
  std::int64_t engines = 2;         // configs heuristics mode A offers (fallback offers none)
  int failing_plans = 1;            // this many plan finalizations fail first
  std::int64_t workspace_bytes = 4096;
  cudnn::Status execute_status = 0;

  // What happened.
  std::vector<std::string> violations;
  int created = 0, graphs = 0, heuristics_queries = 0, plans = 0, executions = 0, handles_destroyed = 0;
  void* stream = nullptr;  // the last one set on the handle
  std::vector<std::int64_t> pack_uids;
  std::vector<void*> pack_pointers;
  void* pack_workspace = nullptr;
  int live() const;  // descriptors created and not destroyed
  void* pointer_of(std::int64_t uid) const;  // in the last variant pack, or null

  // For the API functions.
  std::map<void*, Descriptor> descriptors;
  std::string last_message;
  cudnn::Status fail(const std::string& message);  // records a violation, returns BAD_PARAM
};

}  // namespace tessel::kernels::cuda::fake
