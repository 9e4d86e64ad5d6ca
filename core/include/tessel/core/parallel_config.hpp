// How a step is split over devices: data, pipeline, tensor (1D/2D/2.5D/3D) and
// sequence parallel degrees, ZeRO stage, offload, recompute, micro-batching and the
// pipeline schedule. Rank order (fastest varying first): tp, sp, dp, pp.
#pragma once

#include "tessel/core/enums.hpp"
#include "tessel/core/json_fields.hpp"

namespace tessel {

struct ParallelConfig {
  int dp = 1;
  int pp = 1;
  int tp = 1;
  TpMode tp_mode = TpMode::d1;
  int tp_depth = 1;  // d of 2.5D (tp = q*q*d); 1 otherwise
  bool tp_sequence_parallel = false;  // Megatron-style, 1D only
  // Megatron's --tp-comm-overlap (Transformer Engine userbuffers): the sequence-parallel
  // all-gathers and reduce-scatters of each linear are split into chunks and pipelined
  // with the GEMM beside them. Needs tp > 1, tp_sequence_parallel and tp_mode 1d
  // (check_layout), as Megatron does; off by default, as in the engines.
  bool tp_comm_overlap = false;
  int sp = 1;        // ring self-attention degree
  // Expert-parallel degree: the experts of an MoE MLP are sharded over ep ranks taken
  // from the data-parallel group (ep divides dp and the expert count), as Megatron-Core
  // and DeepSpeed do; not a factor of the world size.
  int ep = 1;
  int zero = 0;      // 0..3
  // ZeRO++'s quantized weights (qwZ, DeepSpeed's zero_quantized_weights): ZeRO-3's weight
  // gathers move int8 blocks, half of 16-bit, and each rank dequantizes what it gathered
  // before the pass. Needs zero 3.
  bool zero_quantized_weights = false;
  OffloadMode offload = OffloadMode::none;
  double offload_device_fraction = 1.0;  // chunked: share of chunks kept on the device
  Recompute recompute = Recompute::none;
  int micro_batch = 1;
  Schedule schedule = Schedule::one_f_one_b;
  int virtual_stages = 1;  // interleaved only

  int world_size() const { return dp * pp * tp * sp; }
  // Side of the tensor-parallel grid: tp for 1D, q for 2D/2.5D/3D.
  int tp_grid_side() const;
  // Ranks that hold identical weights and average gradients: dp x sp.
  int gradient_group() const { return dp * sp; }

  static ParallelConfig from_json(const Json& json, const std::string& path = "parallel");
  Json to_json() const;
  // "dp8 pp4 tp8(1d,sp) sp1 z1 ..." for tables and logs.
  std::string summary() const;
  bool operator==(const ParallelConfig&) const = default;
};

// Integer root helpers for the grid shapes: exact root or 0.
int exact_square_root(int value);
int exact_cube_root(int value);

}  // namespace tessel
