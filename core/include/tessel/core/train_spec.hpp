// What one training step is: the global batch (in sequences), sequence length,
// numeric precision, the precision gradients are kept and reduced in, optimizer and
// whether the kernels are fused, and the framework whose kernels run. The gradient precision is its own field because it
// decides "fits" for real runs: Megatron-LM keeps fp32 main gradients for bf16 training
// (2 bytes per parameter more than bf16 gradients), so the default follows the engine.
#pragma once

#include <optional>
#include <string>

#include "tessel/core/enums.hpp"
#include "tessel/core/json_fields.hpp"

namespace tessel {

struct TrainSpec {
  int global_batch = 0;  // sequences per step
  int seq_len = 0;       // 0 = the model's
  Precision precision = Precision::bf16;
  // Precision of the gradient buffers and of their data-parallel reduction: fp32, or the
  // training precision. Empty: the engines' default for `precision`, so that code that
  // sets only the precision gets the default that goes with it.
  std::optional<Precision> gradient_precision;
  Optimizer optimizer = Optimizer::adamw;
  // Fused kernels: flash-style attention keeps no scores (its memory and its Program
  // ops follow), as the GPU executor runs it.
  Kernels kernels = Kernels::unfused;
  // Dropout (attention scores, after the projection and the MLP): Megatron-LM trains
  // with it, and Korthikanti et al.'s activation formulas count its masks (1 byte per
  // element) and the dropped scores. tessel's executor trains without dropout, so its
  // runs are predicted with false (docs/MEMORY.md).
  bool dropout = true;
  // The framework a GPU run trains with, for the calibration only: the cost terms are the same,
  // but frameworks run the ops between the GEMMs differently. pytorch: eager modules (FSDP,
  // llm-foundry, torchtitan, DeepSpeed), one kernel per elementwise op; megatron: Megatron-LM,
  // Megatron Core and NeMo, fused bias-GeLU, bias-dropout-add, masked softmax and Transformer
  // Engine layers; torch.compile: TorchInductor's fused kernels. A calibration on several holds
  // one memory-bound correction each for megatron and torch.compile (profiles/calibration.hpp).
  Framework framework = Framework::pytorch;
  // The engine the run trains with and the date of its release (engine_defaults.hpp):
  // when a plan names one, its unstated kernels and framework are that engine's defaults
  // at that date. Empty: tessel's own executor, whose defaults are the fields' above.
  std::string engine;
  std::string engine_date;
  // fp8 training only: the fp8 GEMM weights are the parameters themselves (Megatron-LM
  // --fp8-param-gather, NeMo fp8_params, torchtitan enable_fsdp_float8_all_gather): no bf16
  // copy, and ZeRO/FSDP gather them in fp8 (fp8_model.hpp).
  bool fp8_param_gather = false;

  Precision effective_gradient_precision() const;

  static TrainSpec from_json(const Json& json, const std::string& path = "train");
  Json to_json() const;
  bool operator==(const TrainSpec&) const = default;
};

// The engines' default: Megatron-LM accumulates and all-reduces bf16 gradients in fp32
// (arguments.py sets accumulate_allreduce_grads_in_fp32 for --bf16 unless
// --grad-reduce-in-bf16) and keeps fp16 gradients in fp16 unless asked; fp32 stays fp32;
// fp8 training is bf16 training with fp8 GEMMs, so its gradients are fp32 too.
Precision default_gradient_precision(Precision precision);
// Gradients are kept in fp32 or in the training precision (bf16 for fp8): empty when `gradient` is one
// of those, else the reason, for an error that names the field.
std::string gradient_precision_problem(Precision precision, Precision gradient);
// Why fp8 parameters cannot go with `precision` (empty: they can).
std::string fp8_param_gather_problem(Precision precision);

}  // namespace tessel
