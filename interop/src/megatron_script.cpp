// Writes a plan as a Megatron-LM launch script shaped like Megatron's own examples
// (examples/gpt3/train_gpt3_175b_distributed.sh): launcher variables, one option per line,
// torchrun ... pretrain_gpt.py. What Megatron-Core cannot run becomes the nearest plan it can
// (megatron_family.hpp), each change a `#` line at the top; ZeRO 2 and 3 are Megatron FSDP's
// optim_grads and optim_grads_params. Paths, iterations and learning rate are placeholders.
#include <fmt/format.h>

#include "engines.hpp"
#include "megatron_family.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/stage_layers.hpp"

namespace tessel::interop::detail {

namespace {

void add(std::vector<std::string>& lines, const std::string& option) { lines.push_back(option); }

std::vector<std::string> model_options(const Plan& plan) {
  const ModelSpec& m = plan.model;
  std::vector<std::string> lines;
  add(lines, fmt::format("--num-layers {}", m.layers));
  add(lines, fmt::format("--hidden-size {}", m.hidden));
  add(lines, fmt::format("--ffn-hidden-size {}", m.ffn_hidden));
  add(lines, fmt::format("--num-attention-heads {}", m.heads));
  if (m.kv_heads != m.heads) {
    add(lines, "--group-query-attention");
    add(lines, fmt::format("--num-query-groups {}", m.kv_heads));
  }
  add(lines, fmt::format("--seq-length {}", plan.seq_len()));
  add(lines, fmt::format("--max-position-embeddings {}", m.seq_len));
  add(lines, m.position_embedding == PositionEmbedding::rope ? "--position-embedding-type rope"
                                                             : "--position-embedding-type learned_absolute");
  add(lines, m.norm == Norm::rmsnorm ? "--normalization RMSNorm" : "--normalization LayerNorm");
  if (m.activation == Activation::swiglu) add(lines, "--swiglu");
  if (m.activation == Activation::squared_relu) add(lines, "--squared-relu");
  if (!m.tied_embeddings) add(lines, "--untie-embeddings-and-output-weights");
  if (!m.bias) add(lines, "--disable-bias-linear");
  if (m.rope_theta != ModelSpec{}.rope_theta) add(lines, fmt::format("--rotary-base {}", m.rope_theta));
  if (m.rotary_fraction != 1.0) add(lines, fmt::format("--rotary-percent {}", m.rotary_fraction));
  if (m.moe.enabled()) {
    add(lines, fmt::format("--num-experts {}", m.moe.experts));
    add(lines, fmt::format("--moe-router-topk {}", m.moe.top_k));
    add(lines, fmt::format("--moe-ffn-hidden-size {}", m.moe.expert_ffn_hidden));
    if (m.moe.shared_experts > 0)
      add(lines, fmt::format("--moe-shared-expert-intermediate-size {}", m.moe.shared_experts * m.moe.expert_ffn_hidden));
    if (m.moe.every > 1) add(lines, fmt::format("--moe-layer-freq {}", m.moe.every));
    if (m.moe.capacity_factor > 0) add(lines, fmt::format("--moe-expert-capacity-factor {}", m.moe.capacity_factor));
  }
  if (m.vocab == tokenizer_vocab("GPT2BPETokenizer")) {
    add(lines, "--tokenizer-type GPT2BPETokenizer");
    add(lines, "--vocab-file \"$VOCAB_FILE\"");
    add(lines, "--merge-file \"$MERGE_FILE\"");
  } else {
    // Megatron's NullTokenizer takes the size as given; swap in your tokenizer of that size.
    add(lines, "--tokenizer-type NullTokenizer");
    add(lines, fmt::format("--vocab-size {}", m.vocab));
  }
  return lines;
}

std::vector<std::string> training_options(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  std::vector<std::string> lines;
  add(lines, fmt::format("--micro-batch-size {}", p.micro_batch));
  add(lines, fmt::format("--global-batch-size {}", plan.train.global_batch));
  if (plan.train.precision == Precision::bf16 || plan.train.precision == Precision::fp8) add(lines, "--bf16");
  if (plan.train.precision == Precision::fp8) {
    // Transformer Engine's delayed scaling with its own defaults (core/fp8_model.hpp).
    add(lines, "--fp8-format hybrid");
    add(lines, "--fp8-amax-history-len 1024");
    add(lines, "--fp8-amax-compute-algo max");
    if (plan.train.fp8_param_gather) add(lines, "--fp8-param-gather");
  }
  if (plan.train.precision == Precision::fp16) add(lines, "--fp16");
  const Precision gradient = plan.train.effective_gradient_precision();
  if (gradient != default_gradient_precision(plan.train.precision)) {
    add(lines, gradient == Precision::bf16 ? "--grad-reduce-in-bf16" : "--accumulate-allreduce-grads-in-fp32");
  }
  add(lines, "--optimizer adam");
  add(lines, plan.train.kernels == Kernels::fused ? "--attention-backend flash" : "--attention-backend unfused");
  if (!plan.train.dropout) {
    add(lines, "--hidden-dropout 0.0");
    add(lines, "--attention-dropout 0.0");
  }
  if (p.recompute == Recompute::selective) add(lines, "--recompute-granularity selective");
  if (p.recompute == Recompute::full) {
    add(lines, "--recompute-granularity full");
    add(lines, "--recompute-method uniform");
    add(lines, "--recompute-num-layers 1");
  }
  add(lines, "--train-iters ${TRAIN_ITERS:-1000}");
  add(lines, "--lr 3.0e-4");
  add(lines, "--lr-decay-style cosine");
  add(lines, "--clip-grad 1.0");
  return lines;
}

std::vector<std::string> parallel_options(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  std::vector<std::string> lines;
  add(lines, fmt::format("--tensor-model-parallel-size {}", p.tp));
  add(lines, fmt::format("--pipeline-model-parallel-size {}", p.pp));
  // An uneven split (core/stage_layers.hpp): Megatron-LM places the short ends by name.
  // Megatron spreads the rest evenly over the stages it was not told about.
  if (p.pp > 1 && plan.model.layers % p.pp != 0) {
    const ShortEnds ends = short_ends(plan.model.layers, p.pp);
    const int most = most_layers_per_chunk(plan.model.layers, p.pp);
    if (ends.first) add(lines, fmt::format("--decoder-first-pipeline-num-layers {}", most - 1));
    if (ends.last) add(lines, fmt::format("--decoder-last-pipeline-num-layers {}", most - 1));
  }
  if (p.sp > 1) add(lines, fmt::format("--context-parallel-size {}", p.sp));
  if (p.ep > 1) add(lines, fmt::format("--expert-model-parallel-size {}", p.ep));
  if (p.tp_sequence_parallel) add(lines, "--sequence-parallel");
  if (p.tp_comm_overlap) add(lines, "--tp-comm-overlap");
  if (p.schedule == Schedule::interleaved)
    add(lines, fmt::format("--num-layers-per-virtual-pipeline-stage {}", plan.model.layers / (p.pp * p.virtual_stages)));
  if (p.zero == 1) add(lines, "--use-distributed-optimizer");
  if (p.zero >= 2) {
    // Megatron-FSDP (v1) runs on the distributed optimizer and checkpoints only as
    // fsdp_dtensor; validate_args asserts both.
    add(lines, "--use-distributed-optimizer");
    add(lines, "--use-megatron-fsdp");
    add(lines, "--ckpt-format fsdp_dtensor");
    add(lines, p.zero == 2 ? "--data-parallel-sharding-strategy optim_grads"
                           : "--data-parallel-sharding-strategy optim_grads_params");
  }
  if (p.offload == OffloadMode::optimizer) {
    add(lines, "--optimizer-cpu-offload");
    add(lines, "--use-precision-aware-optimizer");
  }
  return lines;
}

void add_array(std::string& text, const std::string& name, const std::vector<std::string>& options) {
  text += name + "=(\n";
  for (const auto& option : options) text += "    " + option + "\n";
  text += ")\n\n";
}

}  // namespace

ExportedConfig export_megatron(const Plan& plan) {
  ExportedConfig out;
  const Plan nearest = nearest_megatron_plan(plan, /*fsdp_zero=*/true, "Megatron-LM", out.not_expressible);
  std::string& text = out.text;
  text += "#!/bin/bash\n";
  text += fmt::format("# Megatron-LM launch script written by tessel: {} on {} x {}\n", nearest.model.name,
                      nearest.nodes, nearest.cluster.name);
  text += fmt::format("# plan: {}\n", nearest.parallel.summary());
  for (const auto& note : out.not_expressible) text += "# cannot express: " + note + "\n";
  text += "# Run it on every node with NODE_RANK and MASTER_ADDR set; give the data with DATA_PATH.\n\n";
  // Tensor and context parallelism want one connection so that their collectives keep
  // order with the GEMMs; Megatron-FSDP refuses it (it overlaps on several).
  if (nearest.parallel.zero < 2) text += "export CUDA_DEVICE_MAX_CONNECTIONS=1\n\n";
  text += fmt::format("GPUS_PER_NODE={}\n", nearest.gpus_per_node());
  text += fmt::format("NUM_NODES={}\n", nearest.cluster.ranks_fill_node() ? 1 : nearest.nodes);
  text += "MASTER_ADDR=${MASTER_ADDR:-localhost}\nMASTER_PORT=${MASTER_PORT:-6000}\nNODE_RANK=${NODE_RANK:-0}\n";
  text += "DATA_PATH=${DATA_PATH:-my-gpt_text_document}\n";
  if (nearest.model.vocab == tokenizer_vocab("GPT2BPETokenizer")) {
    text += "VOCAB_FILE=${VOCAB_FILE:-gpt2-vocab.json}\nMERGE_FILE=${MERGE_FILE:-gpt2-merges.txt}\n";
  }
  text += "\nDISTRIBUTED_ARGS=(\n    --nproc_per_node $GPUS_PER_NODE\n    --nnodes $NUM_NODES\n"
          "    --node_rank $NODE_RANK\n    --master_addr $MASTER_ADDR\n    --master_port $MASTER_PORT\n)\n\n";
  add_array(text, "GPT_MODEL_ARGS", model_options(nearest));
  add_array(text, "TRAINING_ARGS", training_options(nearest));
  add_array(text, "MODEL_PARALLEL_ARGS", parallel_options(nearest));
  add_array(text, "DATA_ARGS", {"--data-path \"$DATA_PATH\"", "--split 949,50,1"});
  add_array(text, "EVAL_AND_LOGGING_ARGS", {"--log-interval 10", "--eval-interval 1000", "--eval-iters 10"});
  text += "torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \\\n    ${GPT_MODEL_ARGS[@]} \\\n    ${TRAINING_ARGS[@]} \\\n"
          "    ${MODEL_PARALLEL_ARGS[@]} \\\n    ${DATA_ARGS[@]} \\\n    ${EVAL_AND_LOGGING_ARGS[@]}\n";
  return out;
}

}  // namespace tessel::interop::detail
