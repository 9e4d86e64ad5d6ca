#include "tessel/core/program.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/model_states.hpp"

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
      return op.group == CommGroup::dp || op.group == CommGroup::embedding ? Stream::dp_comm : Stream::tp_comm;
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

}  // namespace

Program Program::lower(const Plan& plan) {
  plan.validate();
  Program program;
  program.plan_ = plan;
  const ParallelConfig& p = plan.parallel;
  const ModelSpec& model = plan.model;
  const int m = plan.train.global_batch / (p.dp * p.micro_batch);
  const int v = p.schedule == Schedule::interleaved ? p.virtual_stages : 1;
  const int virtual_stages = p.pp * v;
  const int layers_per_chunk = model.layers / virtual_stages;
  const double E = element_bytes(plan.train.precision);
  const ModelStateBytes states = model_state_bytes(plan.train.precision, plan.train.optimizer);
  const BlockOpTable table = block_op_table(model, plan.seq_len(), p, E);
  const int gradient_group = p.gradient_group();
  const double layer_params = table.layer_parameters;
  const bool chunked = p.offload == OffloadMode::chunked;
  const double host_share = chunked ? 1.0 - p.offload_device_fraction : 0.0;
  // The part of a layer's weights one rank keeps (its ZeRO-3 shard), which chunked
  // offload moves between host and device.
  const double layer_shard = table.layer_parameters / (p.zero == 3 ? gradient_group : 1);
  program.micro_batches_ = m;
  // A layer's weights that are not resident (its ZeRO-3 shards, its host-resident part
  // under chunked offload) are fetched before the layer runs, in either direction.
  auto fetch_layer_weights = [&](StageBuilder& b, const std::string& mb, int l, std::string_view pass) {
    if (chunked && host_share > 0) {
      b.before_next(fmt::format("{}/L{}/{}/offload.fetch", mb, l, pass),
                    transfer(OpKind::copy, CommGroup::dp, host_share * layer_shard * states.parameter));
    }
    if (p.zero == 3 && gradient_group > 1) {
      b.before_next(fmt::format("{}/L{}/{}/zero.all_gather", mb, l, pass),
                    transfer(OpKind::collective, CommGroup::dp, layer_params * states.parameter,
                             Collective::all_gather));
    }
  };

  for (int s = 0; s < p.pp; ++s) {
    StageProgram& stage = program.stages_.emplace_back();
    stage.stage = s;
    StageBuilder b(stage);
    std::vector<int> backwards_done(v, 0);
    std::vector<std::uint32_t> step_waits;  // what the optimizer waits for
    std::vector<int> stage_layers;

    for (const PipelineStep& step : pipeline_schedule(p.schedule, s, p.pp, m, v)) {
      const int vs = virtual_stage(s, step.chunk, p.pp);
      const int first_layer = vs * layers_per_chunk;
      const std::string mb = fmt::format("mb{}", step.micro_batch);
      if (step.pass == Pass::forward) {
        if (vs > 0) {
          b.before_next(fmt::format("{}/V{}/fwd/pp.recv", mb, vs),
                        transfer(OpKind::recv, CommGroup::pp, table.stage_boundary_bytes));
          b.op(std::uint32_t(stage.ops.size() - 1)).peer_offset = -1;
        } else {
          for (const BlockOp& op : table.embedding) {
            if (op.forward) b.chain(fmt::format("{}/embed/fwd/{}", mb, op.name), op);
          }
        }
        for (int l = first_layer; l < first_layer + layers_per_chunk; ++l) {
          if (step.micro_batch == 0) stage_layers.push_back(l);
          fetch_layer_weights(b, mb, l, "fwd");
          for (const BlockOp& op : table.block) {
            if (op.forward) b.chain(fmt::format("{}/L{}/fwd/{}", mb, l, op.name), op);
          }
        }
        if (vs == virtual_stages - 1) {
          for (const BlockOp& op : table.head) {
            if (op.forward) b.chain(fmt::format("{}/head/fwd/{}", mb, op.name), op);
          }
        } else {
          b.after_last(fmt::format("{}/V{}/fwd/pp.send", mb, vs),
                       transfer(OpKind::send, CommGroup::pp, table.stage_boundary_bytes), +1);
        }
        continue;
      }
      // ---- backward ----
      const bool last_backward_of_chunk = ++backwards_done[step.chunk] == m;
      if (vs < virtual_stages - 1) {
        const std::uint32_t recv = b.before_next(fmt::format("{}/V{}/bwd/pp.recv", mb, vs),
                                                 transfer(OpKind::recv, CommGroup::pp, table.stage_boundary_bytes));
        b.op(recv).peer_offset = +1;
      } else {
        for (auto it = table.head.rbegin(); it != table.head.rend(); ++it) {
          if (it->backward > 0) b.chain(fmt::format("{}/head/bwd/{}", mb, it->name), scaled(*it, it->backward));
        }
      }
      // Weights a layer's backward needs are requested one layer ahead, before the
      // previous layer's gradient sync, so that they arrive while that layer computes.
      fetch_layer_weights(b, mb, first_layer + layers_per_chunk - 1, "bwd");
      for (int l = first_layer + layers_per_chunk - 1; l >= first_layer; --l) {
        if (p.recompute != Recompute::none) {
          for (const BlockOp& op : table.block) {
            if (op.forward && (p.recompute == Recompute::full || op.selective_recompute)) {
              b.chain(fmt::format("{}/L{}/recompute/{}", mb, l, op.name), op);
            }
          }
        }
        for (auto it = table.block.rbegin(); it != table.block.rend(); ++it) {
          b.chain(fmt::format("{}/L{}/bwd/{}", mb, l, it->name), scaled(*it, it->backward));
        }
        if (l > first_layer) fetch_layer_weights(b, mb, l - 1, "bwd");
        if (gradient_group > 1 && p.zero == 3) {
          step_waits.push_back(b.after_last(fmt::format("{}/L{}/bwd/zero.reduce_scatter", mb, l),
                                            transfer(OpKind::collective, CommGroup::dp, layer_params * states.gradient,
                                                     Collective::reduce_scatter)));
        } else if (gradient_group > 1 && last_backward_of_chunk) {
          // Bucketed gradient sync: a layer's bucket starts as soon as its last backward ends.
          const bool sharded = p.zero >= 1;
          step_waits.push_back(b.after_last(
              fmt::format("L{}/dp/grad.{}", l, sharded ? "reduce_scatter" : "all_reduce"),
              transfer(OpKind::collective, CommGroup::dp, layer_params * states.gradient,
                       sharded ? Collective::reduce_scatter : Collective::all_reduce)));
        }
      }
      if (vs == 0) {
        for (auto it = table.embedding.rbegin(); it != table.embedding.rend(); ++it) {
          if (it->backward > 0) b.chain(fmt::format("{}/embed/bwd/{}", mb, it->name), scaled(*it, it->backward));
        }
      } else {
        b.after_last(fmt::format("{}/V{}/bwd/pp.send", mb, vs),
                     transfer(OpKind::send, CommGroup::pp, table.stage_boundary_bytes), -1);
      }
    }

    // ---- the step's tail: offload copies, optimizer, ZeRO 1/2 parameter gathers ----
    double stage_params = double(stage_layers.size()) * layer_params;
    if (s == 0) stage_params += table.embedding_parameters;
    if (s == p.pp - 1) stage_params += table.head_parameters + table.tied_copy_parameters;
    // With a pipeline the first and last stage each hold the tied token embedding (the
    // last as its LM head); their gradients sum once the backward is done, before the
    // data-parallel sync.
    if (p.pp > 1 && model.tied_embeddings && (s == 0 || s == p.pp - 1) && table.tied_copy_parameters > 0) {
      step_waits.push_back(b.after_last(
          "stage/embed/grad.all_reduce", transfer(OpKind::collective, CommGroup::embedding,
                                                  table.tied_copy_parameters * states.gradient, Collective::all_reduce)));
    }
    // The rest of the stage's weights (embedding, final norm, LM head) sync in one bucket
    // when the backward is done; ZeRO-3 treats them as ZeRO-2 does.
    const double rest_params = stage_params - double(stage_layers.size()) * layer_params;
    if (gradient_group > 1 && rest_params > 0) {
      const bool sharded = p.zero >= 1;
      step_waits.push_back(b.after_last(
          fmt::format("stage/dp/grad.{}", sharded ? "reduce_scatter" : "all_reduce"),
          transfer(OpKind::collective, CommGroup::dp, rest_params * states.gradient,
                   sharded ? Collective::reduce_scatter : Collective::all_reduce)));
    }
    const double optimizer_shard = p.zero >= 1 ? gradient_group : 1;
    const double optimizer_params = stage_params / optimizer_shard;
    if (b.last() >= 0) step_waits.push_back(std::uint32_t(b.last()));
    BlockOp optimizer;
    optimizer.name = "optimizer";
    optimizer.kind = OpKind::memory;
    optimizer.bytes = optimizer_params * states.optimizer_traffic;
    if (p.offload == OffloadMode::optimizer) {
      const std::uint32_t down = b.with_deps("step/offload.grads_d2h",
                                             transfer(OpKind::copy, CommGroup::dp, optimizer_params * states.gradient),
                                             step_waits);
      const std::uint32_t update = b.with_deps("step/optimizer", optimizer, {down});
      b.op(update).on_host = true;
      b.set_last(b.with_deps("step/offload.params_h2d",
                             transfer(OpKind::copy, CommGroup::dp, optimizer_params * states.parameter), {update}));
    } else if (chunked && host_share > 0) {
      // Device-resident chunks update on the device, host-resident ones on the host.
      BlockOp device_part = optimizer, host_part = optimizer;
      device_part.bytes *= 1 - host_share;
      host_part.bytes *= host_share;
      const double gradient_shard = p.zero >= 2 ? gradient_group : 1;
      const std::uint32_t down = b.with_deps(
          "step/offload.grads_d2h",
          transfer(OpKind::copy, CommGroup::dp, host_share * stage_params / gradient_shard * states.gradient), step_waits);
      const std::uint32_t on_device = b.with_deps("step/optimizer", device_part, {down});
      const std::uint32_t on_host = b.with_deps("step/optimizer.host", host_part, {on_device});
      b.op(on_host).on_host = true;
      b.set_last(on_host);
    } else {
      b.set_last(b.with_deps("step/optimizer", optimizer, step_waits));
    }
    if (gradient_group > 1 && p.zero >= 1) {
      if (p.zero <= 2) {
        for (int l : stage_layers) {
          b.after_last(fmt::format("L{}/step/zero.all_gather", l),
                       transfer(OpKind::collective, CommGroup::dp, layer_params * states.parameter,
                                Collective::all_gather));
        }
      }
      if (rest_params > 0) {
        b.after_last("stage/step/zero.all_gather",
                     transfer(OpKind::collective, CommGroup::dp, rest_params * states.parameter, Collective::all_gather));
      }
    }
  }
  return program;
}

}  // namespace tessel
