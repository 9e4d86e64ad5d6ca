// cuDNN's backend (graph) API reached through a table of function pointers: filled by
// dlopen("libcudnn.so.9") at run time (tessel does not link cuDNN, so a machine with an
// older cuDNN, none, or one only in PyTorch's wheel folders still starts), or by a fake in
// the tests. On top of it: a Graph (cudnn_graph.hpp) emitted as descriptors, an execution
// plan chosen by cuDNN's heuristics, and its execution with a variant pack.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cudnn_graph.hpp"

namespace tessel::kernels::cuda::cudnn {

using Status = int;
using Descriptor = void*;
using Handle = void*;

// The calls tessel makes, with cuDNN's signatures (its enums passed as int, as the C ABI
// does). last_error is null where the library lacks cudnnGetLastErrorString.
struct Api {
  std::size_t (*get_version)() = nullptr;
  Status (*create)(Handle*) = nullptr;
  Status (*destroy)(Handle) = nullptr;
  Status (*set_stream)(Handle, void* stream) = nullptr;
  const char* (*error_string)(Status) = nullptr;
  void (*last_error)(char* message, std::size_t max_size) = nullptr;
  Status (*create_descriptor)(int type, Descriptor*) = nullptr;
  Status (*destroy_descriptor)(Descriptor) = nullptr;
  Status (*set_attribute)(Descriptor, int name, int type, std::int64_t count, const void* elements) = nullptr;
  Status (*get_attribute)(Descriptor, int name, int type, std::int64_t requested, std::int64_t* count,
                          void* elements) = nullptr;
  Status (*finalize)(Descriptor) = nullptr;
  Status (*execute)(Handle, Descriptor plan, Descriptor variant_pack) = nullptr;
};

// Opens `library` and resolves every call of Api into `api`. Returns "" on success, else
// why not (dlerror's words, or the first missing symbol). A library that loads stays
// open for the life of the process: closing cuDNN while its threads or exit handlers may
// still run is not worth the few megabytes.
std::string load_api(const char* library, Api& api);

// Throws tessel::Error naming `call`, cuDNN's status and its last error message unless
// `status` is success: the one place every cuDNN status is checked.
void check(const Api& api, Status status, const std::string& call);

// cuDNN's version as "9.19.0" from cudnnGetVersion's 91900.
std::string version_text(std::size_t version);

// Descriptors created for one purpose, destroyed together (in reverse) with this object.
class Descriptors {
 public:
  explicit Descriptors(const Api& api) : api_(&api) {}
  ~Descriptors();
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  Descriptor create(DescriptorType type, const char* what);
  void destroy_last();  // gives back the most recent one (a plan that did not finalize)

 private:
  const Api* api_;
  std::vector<Descriptor> owned_;
};

// A tensor the variant pack names: memory the caller binds, or a by-value scalar whose
// host copy the plan keeps.
struct PackEntry {
  std::int64_t uid = 0;
  bool by_value = false;
  float value = 0.0f;
};

// An execution plan for one Graph, with everything it was built from kept alive.
struct Plan {
  explicit Plan(const Api& api) : descriptors(api) {}
  Descriptors descriptors;
  Descriptor plan = nullptr;
  std::int64_t workspace_bytes = 0;
  std::vector<PackEntry> pack;  // every non-virtual tensor, in uid order
  std::string note;             // which engine the heuristics gave, for the path note
};

// Emits `graph` and finalizes the first engine configuration cuDNN's heuristics offer
// (mode A, then the fallback list) that makes a plan. Throws tessel::Error on any failure,
// including heuristics that offer no engine. `device_properties` (cuDNN 9.8+, optional)
// describes the device instead of the handle's: plans for a GPU this machine lacks.
std::unique_ptr<Plan> build_plan(const Api& api, Handle handle, const Graph& graph, std::size_t version,
                                 Descriptor device_properties = nullptr);

// Runs `plan` on the stream set on `handle` with `bindings` (uid, memory) for every
// tensor of plan.pack that is not by value. Throws tessel::Error on failure, and for a
// binding missing or unknown to the plan.
using Binding = std::pair<std::int64_t, void*>;
void execute(const Api& api, Handle handle, const Plan& plan, const std::vector<Binding>& bindings, void* workspace);

// The descriptors of `graph`'s tensors and operations and the finalized operation graph
// (the part of build_plan that needs no device; tests run it on a real cuDNN).
Descriptor emit_operation_graph(const Api& api, Handle handle, const Graph& graph, std::size_t version,
                                Descriptors& owned);

}  // namespace tessel::kernels::cuda::cudnn
