// The fake cuDNN backend API (fake_cudnn.hpp). Its rules are written from cuDNN's backend
// descriptor reference, independently of cudnn_api.cpp, so that an emitter that sets an
// attribute with the wrong type, count or referent, uses a descriptor before finalizing
// it, or leaves a tensor out of the variant pack fails here.
#include "fake_cudnn.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>

namespace tessel::kernels::cuda::fake {

namespace {

using cudnn::Attribute;
using cudnn::AttributeType;
using cudnn::DescriptorType;
using cudnn::PointwiseMode;

constexpr cudnn::Status kBadParam = 2000, kNotSupported = 3000;
FakeCudnn* current = nullptr;
void* const kHandle = reinterpret_cast<void*>(std::uintptr_t(0x1d0));

struct Rule {
  DescriptorType owner;
  Attribute name;
  AttributeType type;
  std::int64_t min_count, max_count;
  bool required;
  std::vector<DescriptorType> refers;  // for backend descriptors: the kinds allowed
};

const std::vector<Rule>& rules() {
  using D = DescriptorType;
  using A = Attribute;
  using T = AttributeType;
  static const std::vector<D> tensor{D::tensor};
  static const std::vector<D> ops{D::operation_pointwise, D::operation_matmul, D::operation_reduction,
                                  D::operation_reshape};
  static const std::vector<Rule> all = {
      {D::tensor, A::tensor_data_type, T::data_type, 1, 1, true, {}},
      {D::tensor, A::tensor_dims, T::int64, 1, 8, true, {}},
      {D::tensor, A::tensor_strides, T::int64, 1, 8, true, {}},
      {D::tensor, A::tensor_uid, T::int64, 1, 1, true, {}},
      {D::tensor, A::tensor_alignment, T::int64, 1, 1, true, {}},
      {D::tensor, A::tensor_virtual, T::boolean, 1, 1, false, {}},
      {D::tensor, A::tensor_by_value, T::boolean, 1, 1, false, {}},
      {D::pointwise, A::pointwise_mode, T::pointwise_mode, 1, 1, true, {}},
      {D::pointwise, A::pointwise_math_prec, T::data_type, 1, 1, true, {}},
      {D::pointwise, A::pointwise_axis, T::int64, 1, 1, false, {}},
      {D::operation_pointwise, A::pointwise_pw_descriptor, T::backend_descriptor, 1, 1, true, {D::pointwise}},
      {D::operation_pointwise, A::pointwise_x, T::backend_descriptor, 1, 1, true, tensor},
      {D::operation_pointwise, A::pointwise_y, T::backend_descriptor, 1, 1, true, tensor},
      {D::operation_pointwise, A::pointwise_b, T::backend_descriptor, 1, 1, false, tensor},
      {D::operation_pointwise, A::pointwise_t, T::backend_descriptor, 1, 1, false, tensor},
      {D::operation_pointwise, A::pointwise_alpha1, T::float32, 1, 1, false, {}},
      {D::operation_pointwise, A::pointwise_alpha2, T::float32, 1, 1, false, {}},
      {D::matmul, A::matmul_comp_type, T::data_type, 1, 1, true, {}},
      {D::operation_matmul, A::matmul_a, T::backend_descriptor, 1, 1, true, tensor},
      {D::operation_matmul, A::matmul_b, T::backend_descriptor, 1, 1, true, tensor},
      {D::operation_matmul, A::matmul_c, T::backend_descriptor, 1, 1, true, tensor},
      {D::operation_matmul, A::matmul_desc, T::backend_descriptor, 1, 1, true, {D::matmul}},
      {D::reduction, A::reduction_operator, T::reduction_operator, 1, 1, true, {}},
      {D::reduction, A::reduction_comp_type, T::data_type, 1, 1, true, {}},
      {D::operation_reduction, A::reduction_desc, T::backend_descriptor, 1, 1, true, {D::reduction}},
      {D::operation_reduction, A::reduction_x, T::backend_descriptor, 1, 1, true, tensor},
      {D::operation_reduction, A::reduction_y, T::backend_descriptor, 1, 1, true, tensor},
      {D::operation_reshape, A::reshape_x, T::backend_descriptor, 1, 1, true, tensor},
      {D::operation_reshape, A::reshape_y, T::backend_descriptor, 1, 1, true, tensor},
      {D::operation_graph, A::graph_ops, T::backend_descriptor, 1, 1000, true, ops},
      {D::operation_graph, A::graph_handle, T::handle, 1, 1, false, {}},
      {D::engine_heuristics, A::heur_operation_graph, T::backend_descriptor, 1, 1, true, {D::operation_graph}},
      {D::engine_heuristics, A::heur_mode, T::heur_mode, 1, 1, true, {}},
      {D::execution_plan, A::plan_engine_config, T::backend_descriptor, 1, 1, true, {D::engine_config}},
      {D::execution_plan, A::plan_handle, T::handle, 1, 1, false, {}},
      {D::variant_pack, A::pack_uids, T::int64, 1, 1000, true, {}},
      {D::variant_pack, A::pack_pointers, T::void_ptr, 1, 1000, true, {}},
      {D::variant_pack, A::pack_workspace, T::void_ptr, 1, 1, true, {}},
  };
  return all;
}

bool pointer_type(AttributeType t) {
  return t == AttributeType::handle || t == AttributeType::void_ptr || t == AttributeType::backend_descriptor;
}

std::size_t element_bytes(AttributeType t) {
  switch (t) {
    case AttributeType::boolean: return sizeof(bool);
    case AttributeType::int64: return sizeof(std::int64_t);
    case AttributeType::float32: return sizeof(float);
    case AttributeType::handle:
    case AttributeType::void_ptr:
    case AttributeType::backend_descriptor: return sizeof(void*);
    default: return sizeof(int);  // the enums
  }
}

std::string name_of(int type) { return "descriptor type " + std::to_string(type); }

Descriptor* find_live(void* d) {
  auto it = current->descriptors.find(d);
  return it == current->descriptors.end() || it->second.destroyed ? nullptr : &it->second;
}

const Value* attribute(const Descriptor& d, Attribute name) {
  auto it = d.attributes.find(int(name));
  return it == d.attributes.end() ? nullptr : &it->second;
}

Descriptor& referent(const Descriptor& d, Attribute name) { return current->descriptors.at(attribute(d, name)->pointers[0]); }

std::vector<std::int64_t> ints(const Descriptor& d, Attribute name) { return attribute(d, name)->ints; }

cudnn::Status set_attribute(void* d, int name, int type, std::int64_t count, const void* elements) {
  Descriptor* desc = find_live(d);
  if (desc == nullptr) return current->fail("set_attribute on an unknown or destroyed descriptor");
  if (desc->finalized) return current->fail("set_attribute " + std::to_string(name) + " after finalize");
  const auto& all = rules();
  const auto rule = std::find_if(all.begin(), all.end(), [&](const Rule& r) {
    return int(r.owner) == desc->type && int(r.name) == name;
  });
  if (rule == all.end())
    return current->fail("attribute " + std::to_string(name) + " is not one of " + name_of(desc->type));
  if (int(rule->type) != type)
    return current->fail("attribute " + std::to_string(name) + " set as type " + std::to_string(type) + ", not " +
                         std::to_string(int(rule->type)));
  if (count < rule->min_count || count > rule->max_count || elements == nullptr)
    return current->fail("attribute " + std::to_string(name) + " with " + std::to_string(count) + " elements");
  Value value{type, count, {}, {}, 0.0f};
  const auto* bytes = static_cast<const unsigned char*>(elements);
  for (std::int64_t i = 0; i < count; ++i) {
    const unsigned char* at = bytes + i * std::int64_t(element_bytes(rule->type));
    if (pointer_type(rule->type)) {
      void* p = nullptr;
      std::memcpy(&p, at, sizeof(p));
      value.pointers.push_back(p);
    } else if (rule->type == AttributeType::float32) {
      std::memcpy(&value.number, at, sizeof(float));
    } else if (rule->type == AttributeType::int64) {
      std::int64_t v = 0;
      std::memcpy(&v, at, sizeof(v));
      value.ints.push_back(v);
    } else if (rule->type == AttributeType::boolean) {
      value.ints.push_back(*at != 0);
    } else {
      int v = 0;
      std::memcpy(&v, at, sizeof(v));
      value.ints.push_back(v);
    }
  }
  if (rule->type == AttributeType::backend_descriptor) {
    for (void* p : value.pointers) {
      const Descriptor* ref = find_live(p);
      if (ref == nullptr || !ref->finalized)
        return current->fail("attribute " + std::to_string(name) + " refers to a descriptor not finalized");
      if (std::none_of(rule->refers.begin(), rule->refers.end(), [&](DescriptorType t) { return int(t) == ref->type; }))
        return current->fail("attribute " + std::to_string(name) + " refers to " + name_of(ref->type));
    }
  }
  desc->attributes[name] = value;
  return cudnn::kStatusSuccess;
}

// Strides fit the dims when, taken from the smallest, each is at least the span of the
// ones below it: no two elements share memory.
bool strides_fit(std::vector<std::int64_t> dims, std::vector<std::int64_t> strides) {
  std::vector<std::size_t> order(dims.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return strides[a] < strides[b]; });
  std::int64_t span = 1;
  for (const std::size_t i : order) {
    if (dims[i] == 1) continue;
    if (strides[i] < span) return false;
    span = strides[i] * dims[i];
  }
  return true;
}

bool broadcasts_to(const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& out) {
  if (in.size() != out.size()) return false;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (in[i] != out[i] && in[i] != 1) return false;
  return true;
}

std::int64_t elements(const std::vector<std::int64_t>& dims) {
  return std::accumulate(dims.begin(), dims.end(), std::int64_t(1), std::multiplies<>());
}

std::string check_tensor(const Descriptor& d) {
  const auto dims = ints(d, Attribute::tensor_dims), strides = ints(d, Attribute::tensor_strides);
  if (dims.size() != strides.size()) return "tensor with " + std::to_string(dims.size()) + " dims and " +
                                            std::to_string(strides.size()) + " strides";
  if (std::any_of(dims.begin(), dims.end(), [](std::int64_t x) { return x <= 0; })) return "tensor dim <= 0";
  const Value* virtual_flag = attribute(d, Attribute::tensor_virtual);
  const bool is_virtual = virtual_flag && virtual_flag->ints[0];
  if (!is_virtual && !strides_fit(dims, strides)) return "tensor strides do not fit its dims";
  return "";
}

std::string check_pointwise_op(const Descriptor& d) {
  const auto mode = PointwiseMode(ints(referent(d, Attribute::pointwise_pw_descriptor), Attribute::pointwise_mode)[0]);
  const bool unary = mode == PointwiseMode::exp || mode == PointwiseMode::log || mode == PointwiseMode::gen_index;
  const bool select = mode == PointwiseMode::binary_select;
  if (bool(attribute(d, Attribute::pointwise_b)) == unary) return "pointwise b port wrong for its mode";
  if (bool(attribute(d, Attribute::pointwise_t)) != select) return "pointwise t port wrong for its mode";
  const auto out = ints(referent(d, Attribute::pointwise_y), Attribute::tensor_dims);
  for (const Attribute port : {Attribute::pointwise_x, Attribute::pointwise_b, Attribute::pointwise_t})
    if (attribute(d, port) && !broadcasts_to(ints(referent(d, port), Attribute::tensor_dims), out))
      return "pointwise input does not broadcast to its output";
  return "";
}

std::string check_matmul_op(const Descriptor& d) {
  const auto a = ints(referent(d, Attribute::matmul_a), Attribute::tensor_dims);
  const auto b = ints(referent(d, Attribute::matmul_b), Attribute::tensor_dims);
  const auto c = ints(referent(d, Attribute::matmul_c), Attribute::tensor_dims);
  const std::size_t r = a.size();
  if (b.size() != r || c.size() != r || r < 2) return "matmul ranks differ";
  if (a[r - 1] != b[r - 2] || c[r - 2] != a[r - 2] || c[r - 1] != b[r - 1]) return "matmul shapes do not chain";
  return "";
}

// Tensors an operation reads and writes.
void ports(const Descriptor& op, std::vector<void*>& in, std::vector<void*>& out) {
  const auto get = [&](Attribute a, std::vector<void*>& into) {
    if (const Value* v = attribute(op, a)) into.push_back(v->pointers[0]);
  };
  get(Attribute::pointwise_x, in), get(Attribute::pointwise_b, in), get(Attribute::pointwise_t, in);
  get(Attribute::matmul_a, in), get(Attribute::matmul_b, in), get(Attribute::reduction_x, in);
  get(Attribute::reshape_x, in);
  get(Attribute::pointwise_y, out), get(Attribute::matmul_c, out), get(Attribute::reduction_y, out);
  get(Attribute::reshape_y, out);
}

std::string check_graph(Descriptor& graph) {
  std::map<void*, int> produced, consumed;
  for (void* op : attribute(graph, Attribute::graph_ops)->pointers) {
    std::vector<void*> in, out;
    ports(current->descriptors.at(op), in, out);
    for (void* t : in) ++consumed[t];
    for (void* t : out) ++produced[t];
  }
  std::set<std::int64_t> uids;
  for (const auto& entry : consumed) produced.try_emplace(entry.first, 0);  // the graph's inputs
  for (const auto& [t, writes] : produced) {
    const Descriptor& tensor = current->descriptors.at(t);
    const std::int64_t uid = ints(tensor, Attribute::tensor_uid)[0];
    if (!uids.insert(uid).second) return "two tensors with uid " + std::to_string(uid);
    const Value* v = attribute(tensor, Attribute::tensor_virtual);
    const Value* by_value = attribute(tensor, Attribute::tensor_by_value);
    if (v && v->ints[0]) {
      if (writes != 1 || consumed[t] == 0) return "virtual tensor " + std::to_string(uid) + " not made once and used";
    } else {
      if (writes > 1) return "tensor " + std::to_string(uid) + " written twice";
      if (by_value && by_value->ints[0] && writes > 0) return "by-value tensor " + std::to_string(uid) + " written";
      graph.graph_uids.insert(uid);
    }
  }
  return "";
}

std::string check_finalize(Descriptor& d) {
  for (const Rule& r : rules())
    if (int(r.owner) == d.type && r.required && !attribute(d, r.name))
      return name_of(d.type) + " finalized without attribute " + std::to_string(int(r.name));
  switch (DescriptorType(d.type)) {
    case DescriptorType::tensor: return check_tensor(d);
    case DescriptorType::pointwise:
      if (PointwiseMode(ints(d, Attribute::pointwise_mode)[0]) == PointwiseMode::gen_index &&
          !attribute(d, Attribute::pointwise_axis))
        return "gen_index without an axis";
      return "";
    case DescriptorType::operation_pointwise: return check_pointwise_op(d);
    case DescriptorType::operation_matmul: return check_matmul_op(d);
    case DescriptorType::operation_reduction:
      return broadcasts_to(ints(referent(d, Attribute::reduction_y), Attribute::tensor_dims),
                           ints(referent(d, Attribute::reduction_x), Attribute::tensor_dims))
                 ? ""
                 : "reduction output does not fit its input";
    case DescriptorType::operation_reshape:
      return elements(ints(referent(d, Attribute::reshape_x), Attribute::tensor_dims)) ==
                     elements(ints(referent(d, Attribute::reshape_y), Attribute::tensor_dims))
                 ? ""
                 : "reshape changes the element count";
    case DescriptorType::operation_graph: return check_graph(d);
    case DescriptorType::variant_pack:
      return attribute(d, Attribute::pack_uids)->count == attribute(d, Attribute::pack_pointers)->count
                 ? ""
                 : "variant pack with more uids than pointers or fewer";
    default: return "";
  }
}

cudnn::Status finalize(void* d) {
  Descriptor* desc = find_live(d);
  if (desc == nullptr) return current->fail("finalize of an unknown or destroyed descriptor");
  if (desc->finalized) return current->fail("finalize twice");
  if (const std::string broken = check_finalize(*desc); !broken.empty()) return current->fail(broken);
  if (desc->type == int(DescriptorType::operation_graph)) ++current->graphs;
  if (desc->type == int(DescriptorType::engine_heuristics)) ++current->heuristics_queries;
  if (desc->type == int(DescriptorType::execution_plan)) {
    if (current->failing_plans > 0) {
      --current->failing_plans;
      current->last_message = "fake: this engine does not take the graph";
      return kNotSupported;
    }
    desc->graph_uids = referent(*desc, Attribute::plan_engine_config).graph_uids;
    ++current->plans;
  }
  desc->finalized = true;
  return cudnn::kStatusSuccess;
}

cudnn::Status heuristics_results(Descriptor& heur, std::int64_t requested, std::int64_t* count, void* elements) {
  const bool mode_a = ints(heur, Attribute::heur_mode)[0] == cudnn::kHeuristicsModeA;
  const std::int64_t offered = mode_a ? current->engines : 0;
  const Descriptor& graph = referent(heur, Attribute::heur_operation_graph);
  if (requested == 0) return *count = offered, cudnn::kStatusSuccess;
  auto** configs = static_cast<void**>(elements);
  *count = std::min(requested, offered);
  for (std::int64_t i = 0; i < *count; ++i) {
    Descriptor* config = find_live(configs[i]);
    if (config == nullptr || config->type != int(DescriptorType::engine_config) || config->finalized)
      return current->fail("heuristics results into something not a fresh engine config");
    config->finalized = true, config->engine = i, config->graph_uids = graph.graph_uids;
  }
  return cudnn::kStatusSuccess;
}

cudnn::Status get_attribute(void* d, int name, int type, std::int64_t requested, std::int64_t* count, void* elements) {
  Descriptor* desc = find_live(d);
  if (desc == nullptr || !desc->finalized || count == nullptr) return current->fail("get_attribute of a descriptor not finalized");
  const auto expect = [&](DescriptorType owner, AttributeType t) { return desc->type == int(owner) && type == int(t); };
  if (name == int(Attribute::heur_results) && expect(DescriptorType::engine_heuristics, AttributeType::backend_descriptor))
    return heuristics_results(*desc, requested, count, elements);
  if (name == int(Attribute::engine_config_engine) && expect(DescriptorType::engine_config, AttributeType::backend_descriptor)) {
    Descriptor* engine = find_live(*static_cast<void**>(elements));
    if (engine == nullptr || engine->type != int(DescriptorType::engine)) return current->fail("engine query into a non-engine");
    engine->finalized = true, engine->engine = desc->engine, *count = 1;
    return cudnn::kStatusSuccess;
  }
  if (name == int(Attribute::engine_global_index) && expect(DescriptorType::engine, AttributeType::int64))
    return *static_cast<std::int64_t*>(elements) = desc->engine, *count = 1, cudnn::kStatusSuccess;
  if (name == int(Attribute::plan_workspace_size) && expect(DescriptorType::execution_plan, AttributeType::int64))
    return *static_cast<std::int64_t*>(elements) = current->workspace_bytes, *count = 1, cudnn::kStatusSuccess;
  return current->fail("get_attribute " + std::to_string(name) + " of " + name_of(desc->type));
}

cudnn::Status execute(void* handle, void* plan, void* pack) {
  const Descriptor* p = find_live(plan);
  const Descriptor* v = find_live(pack);
  if (handle != kHandle) return current->fail("execute on a handle cudnnCreate did not give");
  if (!p || !p->finalized || p->type != int(DescriptorType::execution_plan)) return current->fail("execute of a bad plan");
  if (!v || !v->finalized || v->type != int(DescriptorType::variant_pack)) return current->fail("execute of a bad pack");
  const auto uids = ints(*v, Attribute::pack_uids);
  const auto& pointers = attribute(*v, Attribute::pack_pointers)->pointers;
  const std::set<std::int64_t> named(uids.begin(), uids.end());
  if (named.size() != uids.size() || named != p->graph_uids)
    return current->fail("variant pack does not name each non-virtual tensor of the graph once");
  if (std::any_of(pointers.begin(), pointers.end(), [](void* x) { return x == nullptr; }))
    return current->fail("variant pack with a null pointer");
  void* workspace = attribute(*v, Attribute::pack_workspace)->pointers[0];
  if (current->workspace_bytes > 0 && workspace == nullptr) return current->fail("no workspace for a plan that needs one");
  current->pack_uids = uids, current->pack_pointers = pointers, current->pack_workspace = workspace;
  ++current->executions;
  return current->execute_status;
}

const char* error_string(cudnn::Status status) {
  switch (status) {
    case 0: return "CUDNN_STATUS_SUCCESS";
    case 1001: return "CUDNN_STATUS_NOT_INITIALIZED";
    case kBadParam: return "CUDNN_STATUS_BAD_PARAM";
    case kNotSupported: return "CUDNN_STATUS_NOT_SUPPORTED";
    case 5000: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN";
  }
}

}  // namespace

FakeCudnn::FakeCudnn() { current = this; }
FakeCudnn::~FakeCudnn() { current = nullptr; }

cudnn::Status FakeCudnn::fail(const std::string& message) {
  violations.push_back(message);
  last_message = "fake: " + message;
  return kBadParam;
}

int FakeCudnn::live() const {
  return int(std::count_if(descriptors.begin(), descriptors.end(), [](const auto& d) { return !d.second.destroyed; }));
}

void* FakeCudnn::pointer_of(std::int64_t uid) const {
  for (std::size_t i = 0; i < pack_uids.size(); ++i)
    if (pack_uids[i] == uid) return pack_pointers[i];
  return nullptr;
}

cudnn::Api FakeCudnn::api() const {
  cudnn::Api api;
  api.get_version = [] { return current->version; };
  api.create = [](cudnn::Handle* h) {
    if (current->create_status == 0) *h = kHandle;
    return current->create_status;
  };
  api.destroy = [](cudnn::Handle h) { return h == kHandle ? (++current->handles_destroyed, 0) : current->fail("destroy"); };
  api.set_stream = [](cudnn::Handle h, void* s) { return h == kHandle ? (current->stream = s, 0) : current->fail("stream"); };
  api.error_string = error_string;
  api.last_error = [](char* message, std::size_t size) {
    std::snprintf(message, size, "%s", current->last_message.c_str());
    current->last_message.clear();
  };
  api.create_descriptor = [](int type, cudnn::Descriptor* d) {
    *d = reinterpret_cast<void*>(std::uintptr_t(0x10000 + 16 * ++current->created));
    current->descriptors[*d].type = type;
    return cudnn::kStatusSuccess;
  };
  api.destroy_descriptor = [](cudnn::Descriptor d) {
    Descriptor* desc = find_live(d);
    if (desc == nullptr) return current->fail("destroy of an unknown or destroyed descriptor");
    desc->destroyed = true;
    return cudnn::kStatusSuccess;
  };
  api.set_attribute = set_attribute;
  api.get_attribute = get_attribute;
  api.finalize = finalize;
  api.execute = execute;
  return api;
}

}  // namespace tessel::kernels::cuda::fake
