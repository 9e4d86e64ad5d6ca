#include "tessel/core/plan.hpp"

#include <array>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/stage_layers.hpp"

namespace tessel {

const char* reject_reason(Reject reason) {
  static constexpr std::array<const char*, std::size_t(Reject::count)> kReasons{
      "valid",
      "tp size does not fit the tp_mode grid",
      "heads not divisible by the tensor split",
      "kv_heads not divisible by the tensor split",
      "hidden not divisible by the tensor split",
      "ffn_hidden not divisible by the tensor split",
      "micro-batch tokens not divisible by the tensor grid",
      "sequence not divisible by sp",
      "layers do not split into pp stages",
      "layers not divisible by pp*virtual_stages",
      "micro-batches not divisible by pp (interleaved)",
      "schedule options do not match pp",
      "global batch not divisible by dp*micro_batch",
      "ep does not divide dp and experts",
      "ep > 1 on a dense model",
      "MoE with a 2d/2.5d/3d tensor grid",
      "selective-op recompute with MoE or tp_comm_overlap",
      "expert_ffn_hidden not divisible by tp",
      "fp8 with a 2d/2.5d/3d tensor grid",
      "dp*pp*tp*sp differs from the GPU count",
      "out of device memory",
      "out of host memory",
  };
  return kReasons[std::size_t(reason)];
}

namespace {
// How many ways the tensor grid splits the hidden/ffn dimensions and the token dimension.
struct TensorSplit {
  int features;  // hidden, ffn and heads are divided by this
  int tokens;    // micro_batch * seq / sp is divided by this
};

TensorSplit tensor_split(const ParallelConfig& p, int q) {
  switch (p.tp_mode) {
    case TpMode::d1: return {p.tp, p.tp_sequence_parallel ? p.tp : 1};
    case TpMode::d2: return {q, q};
    case TpMode::d2_5: return {q, q * p.tp_depth};
    case TpMode::d3: return {q, q * q};
  }
  return {1, 1};
}
// Megatron's --tp-comm-overlap runs on the sequence-parallel 1D layout only.
bool tp_comm_overlap_applies(const ParallelConfig& p) {
  return p.tp > 1 && p.tp_mode == TpMode::d1 && p.tp_sequence_parallel;
}
}  // namespace

Reject check_layout(const ModelSpec& model, const TrainSpec& train, const ParallelConfig& p) {
  const int q = p.tp_grid_side();
  if (q == 0 || (p.tp_mode != TpMode::d2_5 && p.tp_depth != 1) ||
      (p.tp_sequence_parallel && (p.tp_mode != TpMode::d1 || p.tp == 1)) ||
      (p.tp_comm_overlap && !tp_comm_overlap_applies(p))) {
    return Reject::tp_grid_shape;
  }
  const TensorSplit split = tensor_split(p, q);
  const int heads_split = p.tp_mode == TpMode::d1 ? p.tp : q;
  if (model.heads % heads_split != 0) return Reject::heads_split;
  if (model.kv_heads % heads_split != 0 && heads_split % model.kv_heads != 0) return Reject::kv_heads_split;
  const int feature_split = p.tp_mode == TpMode::d3 ? q * q : split.features;
  if (model.hidden % feature_split != 0) return Reject::hidden_split;
  if (model.ffn_hidden % feature_split != 0) return Reject::ffn_split;
  const int seq = effective_seq_len(model, train);
  if (seq % p.sp != 0) return Reject::seq_split;
  if ((std::int64_t(p.micro_batch) * (seq / p.sp)) % split.tokens != 0) return Reject::tokens_split;
  // Even, or one block fewer on the first and on the last stage (stage_layers.hpp).
  if (!splits_into(model.layers, p.pp)) return Reject::layers_per_stage;
  if (train.global_batch % (std::int64_t(p.dp) * p.micro_batch) != 0) return Reject::batch_split;
  if (!model.moe.enabled()) {
    if (p.ep != 1) return Reject::ep_dense;
  } else {
    if (p.ep < 1 || p.dp % p.ep != 0 || model.moe.experts % p.ep != 0) return Reject::ep_split;
    if (p.tp_mode != TpMode::d1 && p.tp > 1) return Reject::moe_tensor_mode;
    if (model.moe.expert_ffn_hidden % p.tp != 0) return Reject::expert_ffn_split;
    if (p.recompute == Recompute::selective_op) return Reject::selective_op_scope;
  }
  // Its replay of a partly replayed GEMM's pipelined collectives is not modelled.
  if (p.recompute == Recompute::selective_op && p.tp_comm_overlap) return Reject::selective_op_scope;
  // Transformer Engine runs fp8 linears in Megatron's 1D layout only (fp8_model.hpp).
  if (train.precision == Precision::fp8 && p.tp_mode != TpMode::d1 && p.tp > 1) return Reject::fp8_tensor_mode;
  // Schedule rules come last: the search checks everything above once per layout
  // and only these per schedule.
  const bool interleaved = p.schedule == Schedule::interleaved;
  if (interleaved ? (p.pp < 2 || p.virtual_stages < 2) : p.virtual_stages != 1) {
    return Reject::schedule_options;
  }
  // Interleaved chunks split by the same rule (stage_layers.hpp): the first chunk (on the
  // first stage) and the last (on the last stage) may be a block short.
  if (interleaved && !splits_into(model.layers, p.pp * p.virtual_stages)) return Reject::interleaved_layers;
  const int micro_batches = train.global_batch / (p.dp * p.micro_batch);
  if (interleaved && micro_batches % p.pp != 0) return Reject::interleaved_microbatches;
  return Reject::none;
}

int Plan::gpus_per_node() const {
  return cluster.ranks_fill_node() ? parallel.world_size() : cluster.gpus_per_node;
}

std::string explain_reject(Reject reason, const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  const ModelSpec& m = plan.model;
  const int q = p.tp_grid_side();
  const std::string mode(to_string(p.tp_mode));
  const int seq = plan.seq_len();
  switch (reason) {
    case Reject::none: return "valid";
    case Reject::tp_grid_shape:
      if (p.tp_comm_overlap && !tp_comm_overlap_applies(p)) {
        return fmt::format("parallel.tp_comm_overlap: overlaps the sequence-parallel gathers and scatters, so it needs "
                           "tp > 1, tp_mode 1d and tp_sequence_parallel true, got tp {} tp_mode {} "
                           "tp_sequence_parallel {}",
                           p.tp, mode, p.tp_sequence_parallel);
      }
      if (p.tp_sequence_parallel && (p.tp_mode != TpMode::d1 || p.tp == 1)) {
        return fmt::format("parallel.tp_sequence_parallel: applies to tp_mode 1d with tp > 1, got tp {} tp_mode {}",
                           p.tp, mode);
      }
      if (p.tp_mode != TpMode::d2_5 && p.tp_depth != 1) {
        return fmt::format("parallel.tp_depth: applies to tp_mode 2.5d only, got {} with tp_mode {}", p.tp_depth, mode);
      }
      if (p.tp_mode == TpMode::d2) return fmt::format("parallel.tp: tp_mode 2d needs a square size, got {}", p.tp);
      if (p.tp_mode == TpMode::d3) return fmt::format("parallel.tp: tp_mode 3d needs a cube size, got {}", p.tp);
      return fmt::format("parallel.tp: tp_mode 2.5d needs tp = q*q*tp_depth, got tp {} with tp_depth {}", p.tp,
                         p.tp_depth);
    case Reject::heads_split:
      return fmt::format("parallel.tp: model heads {} are not divisible by the tensor split {} (tp_mode {})", m.heads,
                         p.tp_mode == TpMode::d1 ? p.tp : q, mode);
    case Reject::kv_heads_split:
      return fmt::format("parallel.tp: model kv_heads {} and the tensor split {} must divide one another", m.kv_heads,
                         p.tp_mode == TpMode::d1 ? p.tp : q);
    case Reject::hidden_split:
      return fmt::format("parallel.tp: model hidden {} is not divisible by the tensor split {} (tp_mode {})", m.hidden,
                         p.tp_mode == TpMode::d3 ? q * q : tensor_split(p, q).features, mode);
    case Reject::ffn_split:
      return fmt::format("parallel.tp: model ffn_hidden {} is not divisible by the tensor split {} (tp_mode {})",
                         m.ffn_hidden, p.tp_mode == TpMode::d3 ? q * q : tensor_split(p, q).features, mode);
    case Reject::seq_split:
      return fmt::format("parallel.sp: sequence length {} is not divisible by sp {}", seq, p.sp);
    case Reject::tokens_split:
      return fmt::format("parallel.micro_batch: micro_batch {} x sequence {}/sp {} tokens do not split over {} ranks "
                         "of the tp_mode {} grid",
                         p.micro_batch, seq, p.sp, tensor_split(p, q).tokens, mode);
    case Reject::layers_per_stage:
      return fmt::format("parallel.pp: {} layers do not split into {} stages (evenly, or with one layer fewer on "
                         "the first and the last stage)",
                         m.layers, p.pp);
    case Reject::schedule_options:
      if (p.schedule == Schedule::interleaved) {
        return fmt::format("parallel.virtual_stages: interleaved needs pp >= 2 and virtual_stages >= 2, got pp {} "
                           "virtual_stages {}", p.pp, p.virtual_stages);
      }
      return fmt::format("parallel.virtual_stages: applies to schedule interleaved only, got {} with schedule {}",
                         p.virtual_stages, to_string(p.schedule));
    case Reject::interleaved_layers:
      return fmt::format("parallel.virtual_stages: {} layers do not split into pp {} x virtual_stages {} chunks "
                         "(evenly, or with the first and the last chunk one layer short)",
                         m.layers, p.pp, p.virtual_stages);
    case Reject::batch_split:
      return fmt::format("train.global_batch: {} is not divisible by dp {} x micro_batch {}", plan.train.global_batch,
                         p.dp, p.micro_batch);
    case Reject::interleaved_microbatches:
      return fmt::format("parallel.schedule: interleaved needs the micro-batch count ({}) divisible by pp {}",
                         plan.train.global_batch / (p.dp * p.micro_batch), p.pp);
    case Reject::ep_split:
      return fmt::format("parallel.ep: {} must divide dp {} and the model's {} experts", p.ep, p.dp, m.moe.experts);
    case Reject::ep_dense:
      return fmt::format("parallel.ep: {} needs a Mixture-of-Experts model (model.moe); model {} is dense, so ep must be 1",
                         p.ep, m.name);
    case Reject::moe_tensor_mode:
      return fmt::format("parallel.tp_mode: MoE blocks are modelled with 1d tensor parallelism only, got {} with tp {}",
                         mode, p.tp);
    case Reject::selective_op_scope:
      return "parallel.recompute: selective-op (torchtitan's op-level policy) is modelled for dense blocks without "
             "tp_comm_overlap; with an MoE model or tp_comm_overlap take none, selective or full";
    case Reject::fp8_tensor_mode:
      return fmt::format("parallel.tp_mode: fp8 training is modelled with 1d tensor parallelism only (as Transformer "
                         "Engine runs it), got {} with tp {}",
                         mode, p.tp);
    case Reject::expert_ffn_split:
      return fmt::format("parallel.tp: model moe.expert_ffn_hidden {} is not divisible by tp {}",
                         m.moe.expert_ffn_hidden, p.tp);
    case Reject::world_size:
      return fmt::format("parallel: dp*pp*tp*sp = {} but the cluster has {} GPUs ({} node(s) x {} per node)",
                         p.world_size(), plan.gpus(), plan.nodes, plan.gpus_per_node());
    case Reject::out_of_device_memory:
    case Reject::out_of_host_memory:
    case Reject::count:
      break;
  }
  return reject_reason(reason);
}

void Plan::validate() const {
  if (std::int64_t(gpus_per_node()) * nodes > limits::kMaxGpus) {
    throw Error(fmt::format("nodes: {} node(s) x {} GPUs is more than the {} GPUs tessel models", nodes,
                            gpus_per_node(), limits::kMaxGpus));
  }
  if (cluster.max_nodes > 0 && nodes > cluster.max_nodes) {
    throw Error(fmt::format("nodes: cluster {} has at most {} node(s), got {}", cluster.name, cluster.max_nodes, nodes));
  }
  if (nodes > 1 && !cluster.inter_node) {
    throw Error(fmt::format("nodes: cluster {} has no inter_node fabric, so nodes must be 1, got {}", cluster.name, nodes));
  }
  if (model.position_embedding == PositionEmbedding::learned && train.seq_len > model.seq_len) {
    throw Error(fmt::format("train.seq_len: {} exceeds the {} learned positions of model {}", train.seq_len,
                            model.seq_len, model.name));
  }
  if (train.gradient_precision) {
    const std::string problem = gradient_precision_problem(train.precision, *train.gradient_precision);
    if (!problem.empty()) throw Error("train.gradient_precision: " + problem);
  }
  if (const std::string problem = fp8_param_gather_problem(train.precision); train.fp8_param_gather && !problem.empty())
    throw Error("train.fp8_param_gather: " + problem);
  if (parallel.zero_quantized_weights && train.fp8_param_gather) {
    throw Error("parallel.zero_quantized_weights: fp8 parameters are gathered in 1 byte already; take one of the two");
  }
  // A grid shape that cannot exist is the root error; report it before the world size.
  const Reject reason = check_layout(model, train, parallel);
  if (reason == Reject::tp_grid_shape) throw Error(explain_reject(reason, *this));
  if (parallel.world_size() != gpus()) throw Error(explain_reject(Reject::world_size, *this));
  if (reason != Reject::none) throw Error(explain_reject(reason, *this));
}

Plan Plan::from_json(const Json& json, const std::string& path) {
  JsonFields f(json, path);
  Plan plan;
  const Json* model = f.get("model");
  if (model == nullptr) f.fail("model", "missing (required): a preset name, a file, or an object");
  plan.model = model_from_json_value(*model, f.field_path("model"));
  const Json* cluster = f.get("cluster");
  if (cluster == nullptr) f.fail("cluster", "missing (required): a preset name, a file, or an object");
  plan.cluster = cluster_from_json_value(*cluster, f.field_path("cluster"));
  plan.nodes = int(f.positive_int_or("nodes", 1, limits::kMaxGpus));
  const Json* train = f.get("train");
  if (train == nullptr) f.fail("train", "missing (required)");
  plan.train = TrainSpec::from_json(*train, f.field_path("train"));
  const Json* parallel = f.get("parallel");
  plan.parallel = parallel ? ParallelConfig::from_json(*parallel, f.field_path("parallel")) : ParallelConfig{};
  f.finish();
  return plan;
}

Plan Plan::load(const std::string& file_path) {
  Plan plan;
  try {
    plan = from_json(read_json_file(file_path), "");
    plan.validate();
  } catch (const Error& error) {
    const std::string message = error.what();
    if (message.rfind(file_path + ":", 0) == 0) throw;
    throw Error(fmt::format("{}: {}", file_path, message));
  }
  return plan;
}

Json Plan::to_json() const {
  return Json{{"model", model.to_json()},
              {"cluster", cluster.to_json()},
              {"nodes", nodes},
              {"train", train.to_json()},
              {"parallel", parallel.to_json()}};
}

}  // namespace tessel
