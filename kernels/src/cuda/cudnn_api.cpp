// cuDNN's backend API through a table of function pointers: loading it, emitting a Graph as
// descriptors, choosing and finalizing an execution plan, executing it. Order and attributes
// follow cuDNN's backend descriptor reference and what cudnn-frontend sets (its Tensor,
// pointwise/matmul/reduction/reshape nodes, plan helpers, Heuristics and ExecutionPlan headers).
#include "cudnn_api.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <type_traits>

#include "tessel/core/error.hpp"

namespace tessel::kernels::cuda::cudnn {

std::string load_api(const char* library, Api& api) {
  void* opened = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (opened == nullptr) {
    const char* why = dlerror();
    return std::string("dlopen(") + library + ") failed: " + (why ? why : "no reason given");
  }
  Api loaded;
  std::string missing;
  const auto resolve = [&](auto& function, const char* name, bool required) {
    void* symbol = dlsym(opened, name);
    if (symbol == nullptr && required && missing.empty()) missing = name;
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(symbol);
  };
  resolve(loaded.get_version, "cudnnGetVersion", true);
  resolve(loaded.create, "cudnnCreate", true);
  resolve(loaded.destroy, "cudnnDestroy", true);
  resolve(loaded.set_stream, "cudnnSetStream", true);
  resolve(loaded.error_string, "cudnnGetErrorString", true);
  resolve(loaded.last_error, "cudnnGetLastErrorString", false);
  resolve(loaded.create_descriptor, "cudnnBackendCreateDescriptor", true);
  resolve(loaded.destroy_descriptor, "cudnnBackendDestroyDescriptor", true);
  resolve(loaded.set_attribute, "cudnnBackendSetAttribute", true);
  resolve(loaded.get_attribute, "cudnnBackendGetAttribute", true);
  resolve(loaded.finalize, "cudnnBackendFinalize", true);
  resolve(loaded.execute, "cudnnBackendExecute", true);
  if (!missing.empty()) {
    dlclose(opened);
    return std::string(library) + " lacks " + missing;
  }
  api = loaded;
  return "";
}

namespace {

// The message check() throws: the call, cuDNN's name for the status, its last error.
std::string failure(const Api& api, Status status, const std::string& call) {
  std::string message = call + " failed: ";
  const char* name = api.error_string ? api.error_string(status) : nullptr;
  message += name ? name : "status";
  message += " (" + std::to_string(status) + ")";
  if (api.last_error) {
    char detail[512] = {};
    api.last_error(detail, sizeof(detail));
    if (detail[0] != '\0') message += ": " + std::string(detail);
  }
  return message;
}

}  // namespace

void check(const Api& api, Status status, const std::string& call) {
  if (status != kStatusSuccess) throw Error(failure(api, status, call));
}

std::string version_text(std::size_t version) {
  // cuDNN 9 counts major * 10000 + minor * 100 + patch; cuDNN 8 used major * 1000.
  const std::size_t major_unit = version >= 10000 ? 10000 : 1000;
  return std::to_string(version / major_unit) + "." + std::to_string(version % major_unit / 100) + "." +
         std::to_string(version % 100);
}

Descriptors::~Descriptors() {
  // No throwing from a destructor: a failing destroy leaks one descriptor at worst.
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) api_->destroy_descriptor(*it);
}

Descriptor Descriptors::create(DescriptorType type, const char* what) {
  Descriptor descriptor = nullptr;
  check(*api_, api_->create_descriptor(int(type), &descriptor), std::string("cudnnBackendCreateDescriptor(") + what + ")");
  owned_.push_back(descriptor);
  return descriptor;
}

void Descriptors::destroy_last() {
  if (owned_.empty()) return;
  api_->destroy_descriptor(owned_.back());
  owned_.pop_back();
}

namespace {

void set(const Api& api, Descriptor d, Attribute name, AttributeType type, std::int64_t count, const void* values,
         const std::string& what) {
  check(api, api.set_attribute(d, int(name), int(type), count, values), "cudnnBackendSetAttribute(" + what + ")");
}

void set_descriptor(const Api& api, Descriptor d, Attribute name, Descriptor value, const std::string& what) {
  set(api, d, name, AttributeType::backend_descriptor, 1, &value, what);
}

void finalize(const Api& api, Descriptor d, const std::string& what) {
  check(api, api.finalize(d), "cudnnBackendFinalize(" + what + ")");
}

// The attribute types' element types: cuDNN's enums are C ints, BOOLEAN a C bool.
using EnumValue = int;
constexpr std::int64_t kAlignmentBytes = 16;  // what the frontend declares for every tensor

Descriptor emit_tensor(const Api& api, Descriptors& owned, const Tensor& t) {
  const std::string what = "tensor " + t.name;
  Descriptor d = owned.create(DescriptorType::tensor, "tensor");
  const EnumValue type = EnumValue(t.type);
  const auto rank = std::int64_t(t.dims.size());
  const bool yes = true;
  set(api, d, Attribute::tensor_data_type, AttributeType::data_type, 1, &type, what + " data type");
  set(api, d, Attribute::tensor_dims, AttributeType::int64, rank, t.dims.data(), what + " dims");
  set(api, d, Attribute::tensor_strides, AttributeType::int64, rank, t.strides.data(), what + " strides");
  set(api, d, Attribute::tensor_uid, AttributeType::int64, 1, &t.uid, what + " uid");
  set(api, d, Attribute::tensor_alignment, AttributeType::int64, 1, &kAlignmentBytes, what + " alignment");
  if (t.is_virtual) set(api, d, Attribute::tensor_virtual, AttributeType::boolean, 1, &yes, what + " virtual");
  if (t.by_value) set(api, d, Attribute::tensor_by_value, AttributeType::boolean, 1, &yes, what + " by value");
  finalize(api, d, what);
  return d;
}

class Emitter {
 public:
  Emitter(const Api& api, const Graph& graph, Descriptors& owned) : api_(api), graph_(graph), owned_(owned) {
    for (const Tensor& t : graph.tensors) tensors_.push_back(emit_tensor(api, owned, t));
  }

  Descriptor node(const Node& n) {
    switch (n.kind) {
      case NodeKind::matmul: return matmul(n);
      case NodeKind::pointwise: return pointwise(n);
      case NodeKind::reduction: return reduction(n);
      case NodeKind::reshape: return reshape(n);
    }
    throw Error("cudnn graph: node " + n.name + " has an unknown kind");
  }

 private:
  Descriptor tensor(std::int64_t id) const {
    for (std::size_t i = 0; i < graph_.tensors.size(); ++i)
      if (graph_.tensors[i].uid == id) return tensors_[i];
    throw Error("cudnn graph: no tensor with uid " + std::to_string(id));
  }

  Descriptor matmul(const Node& n) {
    const std::string what = "matmul " + n.name;
    Descriptor desc = owned_.create(DescriptorType::matmul, "matmul");
    const EnumValue compute = EnumValue(n.compute);
    set(api_, desc, Attribute::matmul_comp_type, AttributeType::data_type, 1, &compute, what + " compute type");
    finalize(api_, desc, what + " descriptor");
    Descriptor op = owned_.create(DescriptorType::operation_matmul, "operation matmul");
    set_descriptor(api_, op, Attribute::matmul_a, tensor(n.x), what + " A");
    set_descriptor(api_, op, Attribute::matmul_b, tensor(n.b), what + " B");
    set_descriptor(api_, op, Attribute::matmul_c, tensor(n.y), what + " C");
    set_descriptor(api_, op, Attribute::matmul_desc, desc, what + " descriptor");
    finalize(api_, op, what);
    return op;
  }

  Descriptor pointwise(const Node& n) {
    const std::string what = "pointwise " + n.name;
    Descriptor desc = owned_.create(DescriptorType::pointwise, "pointwise");
    const EnumValue mode = EnumValue(n.mode), compute = EnumValue(n.compute);
    set(api_, desc, Attribute::pointwise_mode, AttributeType::pointwise_mode, 1, &mode, what + " mode");
    set(api_, desc, Attribute::pointwise_math_prec, AttributeType::data_type, 1, &compute, what + " math precision");
    if (n.mode == PointwiseMode::gen_index)
      set(api_, desc, Attribute::pointwise_axis, AttributeType::int64, 1, &n.axis, what + " axis");
    finalize(api_, desc, what + " descriptor");
    Descriptor op = owned_.create(DescriptorType::operation_pointwise, "operation pointwise");
    set_descriptor(api_, op, Attribute::pointwise_pw_descriptor, desc, what + " descriptor");
    set_descriptor(api_, op, Attribute::pointwise_x, tensor(n.x), what + " x");
    set_descriptor(api_, op, Attribute::pointwise_y, tensor(n.y), what + " y");
    if (n.b != 0) set_descriptor(api_, op, Attribute::pointwise_b, tensor(n.b), what + " b");
    if (n.t != 0) set_descriptor(api_, op, Attribute::pointwise_t, tensor(n.t), what + " t");
    const float one = 1.0f;
    set(api_, op, Attribute::pointwise_alpha1, AttributeType::float32, 1, &one, what + " alpha1");
    set(api_, op, Attribute::pointwise_alpha2, AttributeType::float32, 1, &one, what + " alpha2");
    finalize(api_, op, what);
    return op;
  }

  Descriptor reduction(const Node& n) {
    const std::string what = "reduction " + n.name;
    Descriptor desc = owned_.create(DescriptorType::reduction, "reduction");
    const EnumValue compute = EnumValue(n.compute), op_type = EnumValue(n.reduction);
    set(api_, desc, Attribute::reduction_comp_type, AttributeType::data_type, 1, &compute, what + " compute type");
    set(api_, desc, Attribute::reduction_operator, AttributeType::reduction_operator, 1, &op_type, what + " operator");
    finalize(api_, desc, what + " descriptor");
    Descriptor op = owned_.create(DescriptorType::operation_reduction, "operation reduction");
    set_descriptor(api_, op, Attribute::reduction_desc, desc, what + " descriptor");
    set_descriptor(api_, op, Attribute::reduction_x, tensor(n.x), what + " x");
    set_descriptor(api_, op, Attribute::reduction_y, tensor(n.y), what + " y");
    finalize(api_, op, what);
    return op;
  }

  Descriptor reshape(const Node& n) {
    const std::string what = "reshape " + n.name;
    Descriptor op = owned_.create(DescriptorType::operation_reshape, "operation reshape");
    set_descriptor(api_, op, Attribute::reshape_x, tensor(n.x), what + " x");
    set_descriptor(api_, op, Attribute::reshape_y, tensor(n.y), what + " y");
    finalize(api_, op, what);
    return op;
  }

  const Api& api_;
  const Graph& graph_;
  Descriptors& owned_;
  std::vector<Descriptor> tensors_;  // graph_.tensors' descriptors, same order
};

// Before 9.8 cuDNN wants the handle on the operation graph and on the plan; from 9.8 on
// neither needs it and cudnn-frontend sets only the graph's (the plan's is deprecated).
constexpr std::size_t kHandleOptionalFrom = 90800;

// The engine's global index behind a finalized config, or -1 where cuDNN will not say.
std::int64_t engine_index(const Api& api, Descriptors& owned, Descriptor config) {
  Descriptor engine = owned.create(DescriptorType::engine, "engine");
  std::int64_t count = 0, index = -1;
  if (api.get_attribute(config, int(Attribute::engine_config_engine), int(AttributeType::backend_descriptor), 1, &count,
                        &engine) != kStatusSuccess)
    return -1;
  if (api.get_attribute(engine, int(Attribute::engine_global_index), int(AttributeType::int64), 1, &count, &index) !=
      kStatusSuccess)
    return -1;
  return index;
}

}  // namespace

Descriptor emit_operation_graph(const Api& api, Handle handle, const Graph& graph, std::size_t version,
                                Descriptors& owned) {
  Emitter emitter(api, graph, owned);
  std::vector<Descriptor> ops;
  for (const Node& n : graph.nodes) ops.push_back(emitter.node(n));
  Descriptor op_graph = owned.create(DescriptorType::operation_graph, "operation graph");
  set(api, op_graph, Attribute::graph_ops, AttributeType::backend_descriptor, std::int64_t(ops.size()), ops.data(),
      "operation graph ops");
  if (handle != nullptr || version < kHandleOptionalFrom)
    set(api, op_graph, Attribute::graph_handle, AttributeType::handle, 1, &handle, "operation graph handle");
  finalize(api, op_graph, "operation graph");
  return op_graph;
}

std::unique_ptr<Plan> build_plan(const Api& api, Handle handle, const Graph& graph, std::size_t version,
                                 Descriptor device_properties) {
  auto plan = std::make_unique<Plan>(api);
  Descriptors& owned = plan->descriptors;
  Descriptor op_graph = emit_operation_graph(api, handle, graph, version, owned);
  std::string last_failure = "heuristics offered no engine (modes A and fallback)";
  for (const EnumValue mode : {kHeuristicsModeA, kHeuristicsModeFallback}) {
    const std::string heuristics = std::string("heuristics mode ") + (mode == kHeuristicsModeA ? "A" : "fallback");
    Descriptor heur = owned.create(DescriptorType::engine_heuristics, "engine heuristics");
    set_descriptor(api, heur, Attribute::heur_operation_graph, op_graph, heuristics + " operation graph");
    set(api, heur, Attribute::heur_mode, AttributeType::heur_mode, 1, &mode, heuristics);
    if (device_properties != nullptr)
      set_descriptor(api, heur, Attribute::heur_device_properties, device_properties, heuristics + " device");
    finalize(api, heur, heuristics);
    std::int64_t offered = 0;
    check(api, api.get_attribute(heur, int(Attribute::heur_results), int(AttributeType::backend_descriptor), 0,
                                 &offered, nullptr),
          "cudnnBackendGetAttribute(" + heuristics + " result count)");
    if (offered <= 0) continue;
    std::vector<Descriptor> configs;
    for (std::int64_t i = 0; i < offered; ++i) configs.push_back(owned.create(DescriptorType::engine_config, "engine config"));
    std::int64_t returned = 0;
    check(api, api.get_attribute(heur, int(Attribute::heur_results), int(AttributeType::backend_descriptor), offered,
                                 &returned, configs.data()),
          "cudnnBackendGetAttribute(" + heuristics + " results)");
    for (std::int64_t i = 0; i < std::min(returned, offered); ++i) {
      Descriptor candidate = owned.create(DescriptorType::execution_plan, "execution plan");
      set_descriptor(api, candidate, Attribute::plan_engine_config, configs[std::size_t(i)], "execution plan engine config");
      if (version < kHandleOptionalFrom)
        set(api, candidate, Attribute::plan_handle, AttributeType::handle, 1, &handle, "execution plan handle");
      if (device_properties != nullptr)
        set_descriptor(api, candidate, Attribute::plan_device_properties, device_properties, "execution plan device");
      const Status status = api.finalize(candidate);
      if (status != kStatusSuccess) {
        last_failure = failure(api, status, "cudnnBackendFinalize(execution plan " + std::to_string(i + 1) + " of " +
                                                std::to_string(offered) + ", " + heuristics + ")");
        owned.destroy_last();
        continue;
      }
      std::int64_t count = 0;
      check(api, api.get_attribute(candidate, int(Attribute::plan_workspace_size), int(AttributeType::int64), 1,
                                   &count, &plan->workspace_bytes),
            "cudnnBackendGetAttribute(execution plan workspace size)");
      plan->plan = candidate;
      plan->note = "engine " + std::to_string(engine_index(api, owned, configs[std::size_t(i)])) + " (" + heuristics +
                   ", config " + std::to_string(i + 1) + " of " + std::to_string(returned) + ")";
      for (const std::int64_t id : graph.variant_pack_uids()) {
        const Tensor& t = graph.tensor(id);
        plan->pack.push_back({id, t.by_value, t.value});
      }
      return plan;
    }
  }
  throw Error(last_failure);
}

void execute(const Api& api, Handle handle, const Plan& plan, const std::vector<Binding>& bindings, void* workspace) {
  std::vector<std::int64_t> uids;
  std::vector<void*> pointers;
  for (const PackEntry& entry : plan.pack) {
    uids.push_back(entry.uid);
    if (entry.by_value) {
      pointers.push_back(const_cast<float*>(&entry.value));  // cuDNN reads it on the host, never writes
      continue;
    }
    const auto bound = std::find_if(bindings.begin(), bindings.end(), [&](const Binding& b) { return b.first == entry.uid; });
    if (bound == bindings.end()) throw Error("cudnn execute: no memory bound for tensor uid " + std::to_string(entry.uid));
    pointers.push_back(bound->second);
  }
  for (const Binding& b : bindings)
    if (std::none_of(plan.pack.begin(), plan.pack.end(), [&](const PackEntry& e) { return e.uid == b.first; }))
      throw Error("cudnn execute: the plan has no tensor uid " + std::to_string(b.first));
  Descriptors owned(api);
  Descriptor pack = owned.create(DescriptorType::variant_pack, "variant pack");
  const auto n = std::int64_t(uids.size());
  set(api, pack, Attribute::pack_uids, AttributeType::int64, n, uids.data(), "variant pack uids");
  set(api, pack, Attribute::pack_pointers, AttributeType::void_ptr, n, pointers.data(), "variant pack pointers");
  set(api, pack, Attribute::pack_workspace, AttributeType::void_ptr, 1, &workspace, "variant pack workspace");
  finalize(api, pack, "variant pack");
  check(api, api.execute(handle, plan.plan, pack), "cudnnBackendExecute");
}

}  // namespace tessel::kernels::cuda::cudnn
