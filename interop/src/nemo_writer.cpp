// Writes a plan as a NeMo (1.x) GPT training config shaped like NeMo-Framework-Launcher's
// conf/training/gpt3/175b.yaml: the keys the reader (nemo_yaml.cpp) maps, placeholders for the
// rest. What NeMo cannot run becomes the nearest plan it can (Megatron-Core's limits,
// megatron_family.hpp; no optimizer offload in NeMo 1's YAML); ZeRO 2 and 3 are NeMo's FSDP
// with sharding strategy grad and full.
#include <fmt/format.h>

#include "engines.hpp"
#include "megatron_family.hpp"

namespace tessel::interop::detail {

namespace {
const char* yaml_bool(bool value) { return value ? "true" : "false"; }

const char* nemo_precision(Precision precision) {
  switch (precision) {
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "16";
    case Precision::fp32: return "32";
    case Precision::fp8: return "bf16";  // with model.fp8: true
  }
  return "32";
}
}  // namespace

ExportedConfig export_nemo(const Plan& plan) {
  ExportedConfig out;
  Plan nearest = nearest_megatron_plan(plan, /*fsdp_zero=*/true, "NeMo", out.not_expressible);
  if (nearest.parallel.offload != OffloadMode::none) {
    out.not_expressible.push_back(fmt::format("parallel.offload {}: NeMo's training config has no optimizer offload; "
                                              "wrote none",
                                              to_string(nearest.parallel.offload)));
    nearest.parallel.offload = OffloadMode::none;
  }
  const ModelSpec& m = nearest.model;
  const ParallelConfig& p = nearest.parallel;
  std::string t;
  t += fmt::format("# NeMo training config written by tessel: {} on {} x {}\n", m.name, nearest.nodes,
                   nearest.cluster.name);
  t += fmt::format("# plan: {}\n", p.summary());
  for (const auto& note : out.not_expressible) t += "# cannot express: " + note + "\n";
  t += "trainer:\n";
  t += fmt::format("  num_nodes: {}\n", nearest.cluster.ranks_fill_node() ? 1 : nearest.nodes);
  t += fmt::format("  devices: {}\n", nearest.gpus_per_node());
  t += "  accelerator: gpu\n";
  t += fmt::format("  precision: {}\n", nemo_precision(nearest.train.precision));
  t += "  max_steps: 1000\n  log_every_n_steps: 10\n  accumulate_grad_batches: 1\n  gradient_clip_val: 1.0\n";
  t += "model:\n";
  t += fmt::format("  micro_batch_size: {}\n", p.micro_batch);
  t += fmt::format("  global_batch_size: {}\n", nearest.train.global_batch);
  t += fmt::format("  tensor_model_parallel_size: {}\n", p.tp);
  t += fmt::format("  pipeline_model_parallel_size: {}\n", p.pp);
  t += p.schedule == Schedule::interleaved ? fmt::format("  virtual_pipeline_model_parallel_size: {}\n", p.virtual_stages)
                                           : "  virtual_pipeline_model_parallel_size: null\n";
  t += fmt::format("  context_parallel_size: {}\n", p.sp);
  t += fmt::format("  sequence_parallel: {}\n", yaml_bool(p.tp_sequence_parallel));
  t += fmt::format("  ub_tp_comm_overlap: {}\n", yaml_bool(p.tp_comm_overlap));
  t += fmt::format("  encoder_seq_length: {}\n", nearest.seq_len());
  t += fmt::format("  max_position_embeddings: {}\n", m.seq_len);
  t += fmt::format("  num_layers: {}\n  hidden_size: {}\n  ffn_hidden_size: {}\n", m.layers, m.hidden, m.ffn_hidden);
  t += fmt::format("  num_attention_heads: {}\n  num_query_groups: {}\n", m.heads, m.kv_heads);
  t += fmt::format("  activation: {}\n", m.activation == Activation::swiglu ? "fast-swiglu" : to_string(m.activation));
  t += fmt::format("  normalization: {}\n", m.norm == Norm::rmsnorm ? "rmsnorm" : "layernorm");
  t += fmt::format("  position_embedding_type: {}\n",
                   m.position_embedding == PositionEmbedding::rope ? "rope" : "learned_absolute");
  if (m.rotary_fraction != 1.0) t += fmt::format("  rotary_percentage: {}\n", m.rotary_fraction);
  t += fmt::format("  share_embeddings_and_output_weights: {}\n", yaml_bool(m.tied_embeddings));
  t += fmt::format("  bias: {}\n", yaml_bool(m.bias));
  t += fmt::format("  transformer_engine: {}\n", yaml_bool(nearest.train.kernels == Kernels::fused));
  t += fmt::format("  use_flash_attention: {}\n", yaml_bool(nearest.train.kernels == Kernels::fused));
  t += fmt::format("  hidden_dropout: {}\n  attention_dropout: {}\n", nearest.train.dropout ? "0.1" : "0.0",
                   nearest.train.dropout ? "0.1" : "0.0");
  if (nearest.train.precision == Precision::fp8) {
    // Transformer Engine's delayed scaling with its own defaults (core/fp8_model.hpp).
    t += "  fp8: true\n  fp8_hybrid: true\n  fp8_amax_history_len: 1024\n  fp8_amax_compute_algo: max\n";
    t += fmt::format("  fp8_params: {}\n", yaml_bool(nearest.train.fp8_param_gather));
  } else {
    t += "  fp8: false\n";
  }
  if (p.recompute == Recompute::none) t += "  activations_checkpoint_granularity: null\n";
  if (p.recompute == Recompute::selective) t += "  activations_checkpoint_granularity: selective\n";
  if (p.recompute == Recompute::full) {
    t += "  activations_checkpoint_granularity: full\n  activations_checkpoint_method: uniform\n"
         "  activations_checkpoint_num_layers: 1\n";
  }
  if (p.zero >= 2) t += fmt::format("  fsdp: true\n  fsdp_sharding_strategy: {}\n", p.zero == 2 ? "grad" : "full");
  t += "  tokenizer:\n";
  if (m.vocab == tokenizer_vocab("GPT2BPETokenizer")) {
    t += "    library: megatron\n    type: GPT2BPETokenizer\n    vocab_file: gpt2-vocab.json\n"
         "    merge_file: gpt2-merges.txt\n";
  } else {
    t += fmt::format("    library: sentencepiece\n    model: tokenizer.model  # of {} tokens\n    vocab_size: {}\n",
                     m.vocab, m.vocab);
  }
  t += "  optim:\n";
  t += fmt::format("    name: {}\n", p.zero == 1 ? "distributed_fused_adam" : "fused_adam");
  t += "    lr: 3.0e-4\n    weight_decay: 0.1\n    betas: [0.9, 0.95]\n";
  t += "  data:\n    data_prefix: [1.0, my-gpt_text_document]\n";
  t += fmt::format("    seq_length: {}\n", nearest.seq_len());
  out.text = std::move(t);
  return out;
}

}  // namespace tessel::interop::detail
