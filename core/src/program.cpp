#include "tessel/core/program.hpp"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "tessel/core/chunk_plan.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/fp8_model.hpp"
#include "tessel/core/model_states.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/core/stage_layers.hpp"

namespace tessel {

std::string_view to_string(Stream stream) {
  switch (stream) {
    case Stream::compute: return "compute";
    case Stream::tp_comm: return "tp_comm";
    case Stream::dp_comm: return "dp_comm";
    case Stream::pp_comm: return "pp_comm";
    case Stream::copy: return "copy";
  }
  return "?";
}

std::optional<Stream> stream_from_string(std::string_view name) {
  for (Stream s : {Stream::compute, Stream::tp_comm, Stream::dp_comm, Stream::pp_comm, Stream::copy}) {
    if (to_string(s) == name) return s;
  }
  return std::nullopt;
}

std::size_t Program::op_count() const {
  std::size_t count = 0;
  for (const auto& stage : stages_) count += stage.ops.size();
  return count;
}

double Program::op_bytes_of_rank(int rank, const ProgramOp& op) const {
  if (op.rank_bytes.empty()) return op.work.bytes;
  return op.rank_bytes.at(std::size_t(layout_.position_in_group(rank, kGradientAxes)));
}

namespace {

// The work of `op` repeated `factor` times (backward passes, recomputation).
BlockOp scaled(const BlockOp& op, double factor) {
  BlockOp out = op;
  switch (op.kind) {
    case OpKind::gemm:
    case OpKind::collective: out.count *= factor; break;
    case OpKind::attention: out.flops *= factor; break;
    default: out.bytes *= factor; break;
  }
  return out;
}

BlockOp transfer(OpKind kind, CommGroup group, double bytes, Collective collective = Collective::send_recv) {
  BlockOp op;
  op.kind = kind;
  op.group = group;
  op.bytes = bytes;
  op.collective = collective;
  return op;
}

Stream stream_of(const BlockOp& op) {
  switch (op.kind) {
    case OpKind::collective:
      return op.group == CommGroup::dp || op.group == CommGroup::embedding || op.group == CommGroup::expert_dp
                 ? Stream::dp_comm
                 : Stream::tp_comm;
    case OpKind::send:
    case OpKind::recv: return Stream::pp_comm;
    case OpKind::copy: return Stream::copy;
    default: return Stream::compute;
  }
}

// Appends ops to one stage's list, keeping the chain of compute and model-parallel ops
// that run one after another, and the side ops (receives, gathers, fetches) the next
// chain op must wait for.
class StageBuilder {
 public:
  explicit StageBuilder(StageProgram& out) : out_(out) {}

  // An op on the critical chain: waits for the previous chain op and pending side ops.
  std::uint32_t chain(std::string id, const BlockOp& work) {
    std::vector<std::uint32_t> deps = std::move(pending_);
    pending_.clear();
    if (last_ >= 0) deps.push_back(std::uint32_t(last_));
    last_ = std::int64_t(push(std::move(id), work, std::move(deps)));
    return std::uint32_t(last_);
  }
  // A side op the next chain op waits for (a receive, a prefetching gather).
  std::uint32_t before_next(std::string id, const BlockOp& work, std::vector<std::uint32_t> deps = {}) {
    const std::uint32_t index = push(std::move(id), work, std::move(deps));
    pending_.push_back(index);
    return index;
  }
  // A side op that starts after the current chain op and nothing waits for yet.
  std::uint32_t after_last(std::string id, const BlockOp& work, int peer_offset = 0) {
    std::vector<std::uint32_t> deps;
    if (last_ >= 0) deps.push_back(std::uint32_t(last_));
    const std::uint32_t index = push(std::move(id), work, std::move(deps));
    out_.ops[index].peer_offset = peer_offset;
    return index;
  }
  std::uint32_t with_deps(std::string id, const BlockOp& work, std::vector<std::uint32_t> deps) {
    return push(std::move(id), work, std::move(deps));
  }
  std::int64_t last() const { return last_; }
  std::size_t size() const { return out_.ops.size(); }
  void set_last(std::uint32_t index) { last_ = index; }
  ProgramOp& op(std::uint32_t index) { return out_.ops[index]; }

 private:
  std::uint32_t push(std::string id, const BlockOp& work, std::vector<std::uint32_t> deps) {
    ProgramOp op;
    op.id = std::move(id);
    op.work = work;
    op.stream = stream_of(work);
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    op.deps = std::move(deps);
    out_.ops.push_back(std::move(op));
    return std::uint32_t(out_.ops.size() - 1);
  }
  StageProgram& out_;
  std::vector<std::uint32_t> pending_;
  std::int64_t last_ = -1;
};

// Lowers one plan: the quantities every stage shares, then each stage's ops from its
// pipeline steps (forward, backward) and the step's tail (syncs, optimizer, gathers).
class Lowering {
 public:
  explicit Lowering(const Plan& plan)
      : p_(plan.parallel),
        model_(plan.model),
        train_(plan.train),
        states_(model_state_bytes(plan.train.precision, plan.train.optimizer, plan.train.effective_gradient_precision())),
        table_(block_op_table(plan.model, plan.seq_len(), plan.parallel, plan.train.precision, plan.train.kernels)) {
    m_ = plan.train.global_batch / (p_.dp * p_.micro_batch);
    v_ = p_.schedule == Schedule::interleaved ? p_.virtual_stages : 1;
    virtual_stages_ = p_.pp * v_;
    most_layers_per_stage_ = most_layers_per_stage(model_, p_);
    gradient_group_ = p_.gradient_group();
    expert_group_ = gradient_group_ / std::max(p_.ep, 1);
    chunked_ = p_.offload == OffloadMode::chunked;
    host_share_ = chunked_ ? 1.0 - p_.offload_device_fraction : 0.0;
    // Offload copies come from the chunk plan; MoE models (no chunk plan yet) keep the
    // fractions of the stage's states.
    use_chunks_ = p_.offload != OffloadMode::none && !model_.moe.enabled();
  }

  int micro_batches() const { return m_; }

  // An upper bound on the ops of one stage, counted from the shapes before any is made:
  // per micro-batch and layer the forward, recompute and backward block ops and the
  // weight fetches and syncs; per micro-batch the head, embedding and transfers; the tail.
  double planned_ops_per_stage() const {
    // Chunk fetches: at most one chunk per tensor of a layer (12) in each pass.
    const double per_layer = 3.0 * double(std::max(table_.block.size(), table_.moe_block.size())) + 8 +
                             (use_chunks_ ? 24 : 0);
    const double per_micro_batch = 2.0 * double(table_.head.size() + table_.embedding.size()) + 4.0 * v_;
    const double layers_per_stage = double(most_layers_per_stage_);
    return double(m_) * (layers_per_stage * per_layer + per_micro_batch) + 2 * layers_per_stage + 16;
  }

  StageProgram stage(int s) {
    StageProgram stage;
    stage.stage = s;
    if (use_chunks_) {
      chunks_ = chunk_plan(model_, train_, p_, s);
      fetch_copy_.clear();
      for (std::size_t i = 0; i < chunks_.copies.size(); ++i) {
        if (chunks_.copies[i].op == ops::offload_fetch) fetch_copy_[chunks_.copies[i].op_id] = i;
      }
      segment_of_layer_.assign(std::size_t(model_.layers), -1);
      embedding_segment_ = head_segment_ = -1;
      for (int i = 0; i < int(chunks_.segments.size()); ++i) {
        const ChunkSegment& segment = chunks_.segments[std::size_t(i)];
        if (segment.kind == ChunkSegment::Kind::layer) segment_of_layer_[std::size_t(segment.layer)] = i;
        else (segment.kind == ChunkSegment::Kind::embedding ? embedding_segment_ : head_segment_) = i;
      }
    }
    StageBuilder b(stage);
    std::vector<int> backwards_done(std::size_t(v_), 0);
    std::vector<std::uint32_t> step_waits;  // what the optimizer waits for
    std::vector<int> stage_layers;
    for (const PipelineStep& step : pipeline_schedule(p_.schedule, s, p_.pp, m_, v_)) {
      if (step.pass == Pass::forward) {
        forward(b, s, step, stage_layers);
      } else {
        const bool last_backward_of_chunk = ++backwards_done[std::size_t(step.chunk)] == m_;
        backward(b, s, step, last_backward_of_chunk, step_waits);
      }
    }
    tail(b, s, stage_layers, step_waits);
    return stage;
  }

 private:
  // A layer's weights that are not resident (its ZeRO-3 shards, its host-resident part
  // under chunked offload) are fetched before the layer runs, in either direction.
  void fetch_layer_weights(StageBuilder& b, int mb, int l, ops::Phase phase, std::int64_t prior_first_op) {
    const bool moe = model_.moe.is_moe_layer(l);
    if (use_chunks_) {
      fetch_chunks(b, mb, segment_of_layer_[std::size_t(l)], phase, prior_first_op);
    } else if (chunked_ && host_share_ > 0) {
      const double shard = table_.layer_parameters_of(model_, l) / (p_.zero == 3 ? gradient_group_ : 1) +
                           (moe ? table_.expert_parameters / (p_.zero == 3 ? expert_group_ : 1) : 0.0);
      b.before_next(ops::block_op_id(mb, l, phase, ops::offload_fetch),
                    transfer(OpKind::copy, CommGroup::dp, host_share_ * shard * states_.parameter));
    }
    if (p_.zero == 3 && gradient_group_ > 1) {
      b.before_next(ops::block_op_id(mb, l, phase, ops::zero_all_gather),
                    transfer(OpKind::collective, CommGroup::dp, table_.layer_parameters_of(model_, l) * gathered_bytes(l),
                             Collective::all_gather));
      // fp8: gathered weights are cast after each gather, not cached for the step.
      if (const double elements = table_.fp8_weight_elements_of(model_, l); elements > 0) {
        BlockOp cast;
        cast.name = ops::fp8_weight_cast;
        cast.kind = OpKind::memory;
        cast.library_kernel = true;
        cast.bytes = elements * fp8::weight_cast_bytes(train_.fp8_param_gather);
        b.chain(ops::block_op_id(mb, l, phase, ops::fp8_weight_cast), cast);
      }
    }
    if (moe && p_.zero == 3 && expert_group_ > 1) {
      b.before_next(ops::expert_op_id(mb, l, phase, ops::zero_all_gather),
                    transfer(OpKind::collective, CommGroup::expert_dp, table_.expert_parameters * gathered_bytes(l),
                             Collective::all_gather));
    }
  }

  // The host-resident chunks whose first use in this pass is `segment`, fetched on the
  // copy stream (chunk_plan.hpp): issued once the previous segment's first op
  // (`prior_first_op`, or the last chain op at the start of a pass) is done, waited for
  // by the segment's first op.
  void fetch_chunks(StageBuilder& b, int mb, int segment, ops::Phase phase, std::int64_t prior_first_op) {
    if (!use_chunks_ || segment < 0) return;
    const std::int64_t after = prior_first_op >= 0 ? prior_first_op : b.last();
    for (int c : chunks_.fetches_before(segment, phase)) {
      std::vector<std::uint32_t> deps;
      if (after >= 0) deps.push_back(std::uint32_t(after));
      const ChunkCopy& copy = chunks_.copies[fetch_copy_.at(ops::chunk_copy_id(mb, c, phase, ops::offload_fetch))];
      copy_op(b, copy, b.before_next(copy.op_id, transfer(OpKind::copy, CommGroup::dp, copy.bytes), std::move(deps)));
    }
  }

  void forward(StageBuilder& b, int s, const PipelineStep& step, std::vector<int>& stage_layers) {
    const int vs = virtual_stage(s, step.chunk, p_.pp);
    const LayerSpan layers = chunk_layers(model_, p_, s, step.chunk);
    const int mb = step.micro_batch;
    if (vs > 0) {
      b.before_next(ops::transfer_op_id(mb, vs, ops::Phase::fwd, ops::pp_recv),
                    transfer(OpKind::recv, CommGroup::pp, table_.stage_boundary_bytes));
      b.op(std::uint32_t(b.size() - 1)).peer_offset = -1;
    }
    std::int64_t prior_first_op = -1;  // the previous segment's first op in this pass
    if (vs == 0) {
      fetch_chunks(b, mb, embedding_segment_, ops::Phase::fwd, prior_first_op);
      prior_first_op = std::int64_t(b.size());
      for (const BlockOp& op : table_.embedding) {
        if (op.forward) b.chain(ops::part_op_id(mb, ops::Part::embed, ops::Phase::fwd, op.name), op);
      }
    }
    for (int l = layers.first; l < layers.end(); ++l) {
      if (step.micro_batch == 0) stage_layers.push_back(l);
      fetch_layer_weights(b, mb, l, ops::Phase::fwd, prior_first_op);
      prior_first_op = std::int64_t(b.size());
      for (const BlockOp& op : table_.ops_of_layer(model_, l)) {
        if (op.forward) b.chain(ops::block_op_id(mb, l, ops::Phase::fwd, op.name), op);
      }
    }
    if (vs == virtual_stages_ - 1) {
      fetch_chunks(b, mb, head_segment_, ops::Phase::fwd, prior_first_op);
      for (const BlockOp& op : table_.head) {
        if (op.forward) b.chain(ops::part_op_id(mb, ops::Part::head, ops::Phase::fwd, op.name), op);
      }
    } else {
      b.after_last(ops::transfer_op_id(mb, vs, ops::Phase::fwd, ops::pp_send),
                   transfer(OpKind::send, CommGroup::pp, table_.stage_boundary_bytes), +1);
    }
  }

  void backward(StageBuilder& b, int s, const PipelineStep& step, bool last_backward_of_chunk,
                std::vector<std::uint32_t>& step_waits) {
    const int vs = virtual_stage(s, step.chunk, p_.pp);
    const LayerSpan layers = chunk_layers(model_, p_, s, step.chunk);
    const int mb = step.micro_batch;
    if (vs < virtual_stages_ - 1) {
      const std::uint32_t recv = b.before_next(ops::transfer_op_id(mb, vs, ops::Phase::bwd, ops::pp_recv),
                                               transfer(OpKind::recv, CommGroup::pp, table_.stage_boundary_bytes));
      b.op(recv).peer_offset = +1;
    }
    std::int64_t prior_first_op = -1;  // the previous segment's first op in this pass
    if (vs == virtual_stages_ - 1) {
      fetch_chunks(b, mb, head_segment_, ops::Phase::bwd, prior_first_op);
      prior_first_op = std::int64_t(b.size());
      for (auto it = table_.head.rbegin(); it != table_.head.rend(); ++it) {
        if (it->backward > 0) {
          b.chain(ops::part_op_id(mb, ops::Part::head, ops::Phase::bwd, it->name), scaled(*it, it->backward));
        }
      }
    }
    // Weights a layer's backward needs are requested one layer ahead, before the
    // previous layer's gradient sync, so that they arrive while that layer computes.
    fetch_layer_weights(b, mb, layers.end() - 1, ops::Phase::bwd, prior_first_op);
    for (int l = layers.end() - 1; l >= layers.first; --l) {
      const std::vector<BlockOp>& block = table_.ops_of_layer(model_, l);
      prior_first_op = std::int64_t(b.size());
      for (const BlockOp& op : block) {
        const double share = op.replayed_share(p_.recompute);
        if (share > 0) b.chain(ops::block_op_id(mb, l, ops::Phase::recompute, op.name), scaled(op, share));
      }
      for (auto it = block.rbegin(); it != block.rend(); ++it) {
        b.chain(ops::block_op_id(mb, l, ops::Phase::bwd, it->name), scaled(*it, it->backward));
      }
      if (l > layers.first) fetch_layer_weights(b, mb, l - 1, ops::Phase::bwd, prior_first_op);
      sync_layer_gradients(b, mb, l, last_backward_of_chunk, step_waits);
    }
    if (vs == 0) {
      fetch_chunks(b, mb, embedding_segment_, ops::Phase::bwd, prior_first_op);
      for (auto it = table_.embedding.rbegin(); it != table_.embedding.rend(); ++it) {
        if (it->backward > 0) {
          b.chain(ops::part_op_id(mb, ops::Part::embed, ops::Phase::bwd, it->name), scaled(*it, it->backward));
        }
      }
    } else {
      b.after_last(ops::transfer_op_id(mb, vs, ops::Phase::bwd, ops::pp_send),
                   transfer(OpKind::send, CommGroup::pp, table_.stage_boundary_bytes), -1);
    }
  }

  // A layer's gradients leave once its backward is done: ZeRO-2 and 3 reduce-scatter
  // them every micro-batch (DeepSpeed's ZeRO-2 and FSDP keep only their shard, summed
  // over the micro-batches), else the bucket syncs after the layer's last backward (ZeRO-1
  // is Megatron's distributed optimizer: whole gradient buffers, one reduce-scatter per
  // step). An MoE block's routed experts are a bucket of their own over the expert_dp
  // group.
  void sync_layer_gradients(StageBuilder& b, int mb, int l, bool last_backward_of_chunk,
                            std::vector<std::uint32_t>& step_waits) {
    const bool moe = model_.moe.is_moe_layer(l);
    const double params = table_.layer_parameters_of(model_, l);
    if (p_.zero >= 2) {
      if (gradient_group_ > 1) {
        step_waits.push_back(b.after_last(ops::block_op_id(mb, l, ops::Phase::bwd, ops::zero_reduce_scatter),
                                          transfer(OpKind::collective, CommGroup::dp, params * states_.gradient,
                                                   Collective::reduce_scatter)));
      }
      if (moe && expert_group_ > 1) {
        step_waits.push_back(b.after_last(ops::expert_op_id(mb, l, ops::Phase::bwd, ops::zero_reduce_scatter),
                                          transfer(OpKind::collective, CommGroup::expert_dp,
                                                   table_.expert_parameters * states_.gradient,
                                                   Collective::reduce_scatter)));
      }
      return;
    }
    if (!last_backward_of_chunk) return;
    // Bucketed gradient sync: a layer's bucket starts as soon as its last backward ends.
    const bool sharded = p_.zero >= 1;
    const std::string_view op = sharded ? ops::grad_reduce_scatter : ops::grad_all_reduce;
    const Collective collective = sharded ? Collective::reduce_scatter : Collective::all_reduce;
    if (gradient_group_ > 1) {
      step_waits.push_back(b.after_last(ops::bucket_sync_id(ops::layer_bucket_name(l), op),
                                        transfer(OpKind::collective, CommGroup::dp, params * states_.gradient, collective)));
    }
    if (moe && expert_group_ > 1) {
      step_waits.push_back(b.after_last(
          ops::bucket_sync_id(ops::expert_bucket_name(l), op),
          transfer(OpKind::collective, CommGroup::expert_dp, table_.expert_parameters * states_.gradient, collective)));
    }
  }

  // The step's tail: the tied embedding's sum, the rest of the stage's weights' sync,
  // offload copies, the optimizer, ZeRO 1/2 parameter gathers.
  void tail(StageBuilder& b, int s, const std::vector<int>& stage_layers, std::vector<std::uint32_t>& step_waits) {
    double layer_params = 0, expert_params = 0;
    for (int l : stage_layers) {
      layer_params += table_.layer_parameters_of(model_, l);
      if (model_.moe.is_moe_layer(l)) expert_params += table_.expert_parameters;
    }
    double stage_params = layer_params;
    if (s == 0) stage_params += table_.embedding_parameters;
    if (s == p_.pp - 1) stage_params += table_.head_parameters + table_.tied_copy_parameters;
    // With a pipeline the first and last stage each hold the tied token embedding (the
    // last as its LM head); their gradients sum once the backward is done, before the
    // data-parallel sync.
    if (p_.pp > 1 && model_.tied_embeddings && (s == 0 || s == p_.pp - 1) && table_.tied_copy_parameters > 0) {
      step_waits.push_back(b.after_last(std::string(ops::kTiedEmbeddingSync),
                                        transfer(OpKind::collective, CommGroup::embedding,
                                                 table_.tied_copy_parameters * states_.gradient, Collective::all_reduce)));
    }
    // The rest of the stage's weights (embedding, final norm, LM head) sync in one bucket
    // when the backward is done; ZeRO-3 treats them as ZeRO-2 does.
    const double rest_params = stage_params - layer_params;
    if (gradient_group_ > 1 && rest_params > 0) {
      const bool sharded = p_.zero >= 1;
      step_waits.push_back(b.after_last(
          ops::bucket_sync_id(ops::kStageBucket, sharded ? ops::grad_reduce_scatter : ops::grad_all_reduce),
          transfer(OpKind::collective, CommGroup::dp, rest_params * states_.gradient,
                   sharded ? Collective::reduce_scatter : Collective::all_reduce)));
    }
    if (b.last() >= 0) step_waits.push_back(std::uint32_t(b.last()));
    if (use_chunks_) chunk_optimizer(b, step_waits);
    else optimizer(b, stage_params, expert_params, step_waits);
    fp8_weight_cast(b, stage_layers);
    std::vector<std::uint32_t> gathers;
    if (p_.zero >= 1 && p_.zero <= 2) {
      for (int l : stage_layers) {
        if (gradient_group_ > 1) {
          gathers.push_back(b.after_last(ops::bucket_gather_id(ops::layer_bucket_name(l)),
                       transfer(OpKind::collective, CommGroup::dp, table_.layer_parameters_of(model_, l) * gathered_bytes(l),
                                Collective::all_gather)));
        }
        if (model_.moe.is_moe_layer(l) && expert_group_ > 1) {
          b.after_last(ops::bucket_gather_id(ops::expert_bucket_name(l)),
                       transfer(OpKind::collective, CommGroup::expert_dp, table_.expert_parameters * gathered_bytes(l),
                                Collective::all_gather));
        }
      }
    }
    if (gradient_group_ > 1 && p_.zero >= 1) {
      if (rest_params > 0) {
        gathers.push_back(b.after_last(
            ops::bucket_gather_id(ops::kStageBucket),
            transfer(OpKind::collective, CommGroup::dp, rest_params * states_.parameter, Collective::all_gather)));
      }
    }
    // Host-resident chunks whose weights only the optimizer shards go back down whole
    // once the gathers have rebuilt them (chunk_plan.hpp).
    for (const ChunkCopy& copy : use_chunks_ ? chunks_.copies : std::vector<ChunkCopy>{}) {
      if (copy.op == ops::offload_params_d2h) {
        copy_op(b, copy, b.with_deps(copy.op_id, transfer(OpKind::copy, CommGroup::dp, copy.bytes), gathers));
      }
    }
  }

  // The optimizer of a chunk plan: owned gradients of chunks updated on the host go
  // down once the syncs are done, the host updates them (device-resident chunks update
  // on the device), updated weights go back up where the plan says.
  void chunk_optimizer(StageBuilder& b, const std::vector<std::uint32_t>& step_waits) {
    BlockOp update;
    update.name = ops::optimizer;
    update.kind = OpKind::memory;
    std::vector<std::uint32_t> downs;
    for (const ChunkCopy& copy : chunks_.copies) {
      if (copy.op == ops::offload_grads_d2h) {
        downs.push_back(
            copy_op(b, copy, b.with_deps(copy.op_id, transfer(OpKind::copy, CommGroup::dp, copy.bytes), step_waits)));
      }
    }
    std::int64_t last = -1;
    if (chunks_.device_optimizer_elements > 0) {
      BlockOp device_part = update;
      device_part.bytes = chunks_.device_optimizer_elements * states_.optimizer_traffic;
      last = b.with_deps(ops::step_op_id(ops::optimizer), device_part, step_waits);
    }
    if (chunks_.host_optimizer_elements > 0) {
      BlockOp host_part = update;
      host_part.bytes = chunks_.host_optimizer_elements * states_.optimizer_traffic;
      std::vector<std::uint32_t> deps = downs;
      if (last >= 0) deps.push_back(std::uint32_t(last));
      // The whole step's host update is step/optimizer under `offload: optimizer`, its
      // host part step/optimizer.host under chunked.
      const std::string_view name = p_.offload == OffloadMode::optimizer ? ops::optimizer : ops::optimizer_host;
      last = b.with_deps(ops::step_op_id(name), host_part, deps);
      b.op(std::uint32_t(last)).on_host = true;
    }
    const std::uint32_t updated = std::uint32_t(last);
    for (const ChunkCopy& copy : chunks_.copies) {
      if (copy.op == ops::offload_params_h2d) {
        last = copy_op(b, copy, b.with_deps(copy.op_id, transfer(OpKind::copy, CommGroup::dp, copy.bytes), {updated}));
      }
    }
    b.set_last(std::uint32_t(last));
  }

  // The optimizer step, on the device or, with offload, in host memory between copies.
  // `stage_params` excludes the routed experts (`expert_params`), which ZeRO shards over
  // the expert_dp group.
  void optimizer(StageBuilder& b, double stage_params, double expert_params,
                 const std::vector<std::uint32_t>& step_waits) {
    const double optimizer_shard = p_.zero >= 1 ? gradient_group_ : 1;
    const double expert_shard = p_.zero >= 1 ? expert_group_ : 1;
    const double optimizer_params = stage_params / optimizer_shard + expert_params / expert_shard;
    BlockOp update;
    update.name = ops::optimizer;
    update.kind = OpKind::memory;
    update.bytes = optimizer_params * states_.optimizer_traffic;
    if (p_.offload == OffloadMode::optimizer) {
      const std::uint32_t down =
          b.with_deps(ops::step_op_id(ops::offload_grads_d2h),
                      transfer(OpKind::copy, CommGroup::dp, optimizer_params * states_.gradient), step_waits);
      const std::uint32_t on_host = b.with_deps(ops::step_op_id(ops::optimizer), update, {down});
      b.op(on_host).on_host = true;
      b.set_last(b.with_deps(ops::step_op_id(ops::offload_params_h2d),
                             transfer(OpKind::copy, CommGroup::dp, optimizer_params * states_.parameter), {on_host}));
    } else if (chunked_ && host_share_ > 0) {
      // Device-resident chunks update on the device, host-resident ones on the host.
      BlockOp device_part = update, host_part = update;
      device_part.bytes *= 1 - host_share_;
      host_part.bytes *= host_share_;
      const double gradient_shard = p_.zero >= 2 ? gradient_group_ : 1;
      const double expert_gradient_shard = p_.zero >= 2 ? expert_group_ : 1;
      const double gradients = stage_params / gradient_shard + expert_params / expert_gradient_shard;
      const std::uint32_t down =
          b.with_deps(ops::step_op_id(ops::offload_grads_d2h),
                      transfer(OpKind::copy, CommGroup::dp, host_share_ * gradients * states_.gradient), step_waits);
      const std::uint32_t on_device = b.with_deps(ops::step_op_id(ops::optimizer), device_part, {down});
      const std::uint32_t on_host = b.with_deps(ops::step_op_id(ops::optimizer_host), host_part, {on_device});
      b.op(on_host).on_host = true;
      b.set_last(on_host);
    } else {
      b.set_last(b.with_deps(ops::step_op_id(ops::optimizer), update, step_waits));
    }
  }

  // fp8 training: the stage's fp8 GEMM weights, updated by the optimizer, cast once per
  // step on the device (Transformer Engine casts them on the first micro-batch and
  // reuses the cast; priced here, after the update that makes them). Under ZeRO-3 they
  // are cast after each gather instead (fetch_layer_weights).
  void fp8_weight_cast(StageBuilder& b, const std::vector<int>& stage_layers) {
    if (p_.zero == 3 && gradient_group_ > 1) return;
    double elements = 0;
    for (int l : stage_layers) elements += table_.fp8_weight_elements_of(model_, l);
    if (elements <= 0) return;
    BlockOp cast;
    cast.name = ops::fp8_weight_cast;
    cast.kind = OpKind::memory;
    cast.library_kernel = true;
    cast.bytes = elements * fp8::weight_cast_bytes(train_.fp8_param_gather);
    b.set_last(b.with_deps(ops::step_op_id(ops::fp8_weight_cast), cast, {std::uint32_t(b.last())}));
  }

  // Bytes per parameter a gather of layer l's weights moves (fp8 parameters: less).
  double gathered_bytes(int l) const {
    return fp8::gathered_parameter_bytes(states_.parameter, table_.fp8_share_of(model_, l), train_.fp8_param_gather);
  }
  const ParallelConfig& p_;
  const ModelSpec& model_;
  const TrainSpec& train_;
  const ModelStateBytes states_;
  const BlockOpTable table_;
  int m_ = 0, v_ = 1, virtual_stages_ = 1, most_layers_per_stage_ = 0, gradient_group_ = 1, expert_group_ = 1;
  double host_share_ = 0;
  bool chunked_ = false;
  // A chunk copy's op: the bytes each rank of the gradient group moves go with it.
  static std::uint32_t copy_op(StageBuilder& b, const ChunkCopy& copy, std::uint32_t index) {
    b.op(index).rank_bytes = copy.rank_bytes;
    return index;
  }

  bool use_chunks_ = false;
  ChunkPlan chunks_;  // of the stage being lowered
  std::unordered_map<std::string, std::size_t> fetch_copy_;  // fetch op id -> its index in chunks_.copies
  std::vector<int> segment_of_layer_;
  int embedding_segment_ = -1, head_segment_ = -1;
};

// Refuses, before any op is made, a program whose ops would not fit in this machine's
// memory (a 10^6-layer model: hours of allocation, then std::bad_alloc) or whose op
// indices would not fit the 32 bits its dependencies are stored in.
void refuse_programs_beyond_memory(double ops_per_stage, int stages) {
  // An op: its struct, its id string and its dependency list on the heap.
  constexpr double kBytesPerOp = double(sizeof(ProgramOp)) + 96;
  const double ops = ops_per_stage * stages, bytes = ops * kBytesPerOp;
  const double memory_bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (ops_per_stage > double(std::numeric_limits<std::uint32_t>::max()) || (memory_bytes > 0 && bytes > memory_bytes)) {
    throw Error(fmt::format("plan: its program needs about {:.3g} ops ({:.3g} GiB), more than this machine's {:.3g} GiB "
                            "of memory; lower layers or global_batch (micro-batches) to simulate or run it",
                            ops, bytes / double(1 << 30), memory_bytes / double(1 << 30)));
  }
}

}  // namespace

Program Program::lower(const Plan& plan) {
  plan.validate();
  Program program;
  program.plan_ = plan;
  program.layout_ = RankLayout(plan.parallel);
  Lowering lowering(plan);
  refuse_programs_beyond_memory(lowering.planned_ops_per_stage(), plan.parallel.pp);
  program.micro_batches_ = lowering.micro_batches();
  for (int s = 0; s < plan.parallel.pp; ++s) program.stages_.push_back(lowering.stage(s));
  return program;
}

}  // namespace tessel
