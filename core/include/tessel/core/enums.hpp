// The closed vocabularies of tessel's specs, each with its JSON/CLI spelling. One
// table per enum keeps parsing, printing and error messages ("must be one of ...")
// in agreement.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace tessel {

// fp8: Transformer Engine's fp8 training (fp8_model.hpp says which ops run in fp8): the
// linear layers' GEMMs in fp8, everything else in bf16 (storage_precision).
enum class Precision { fp32, bf16, fp16, fp8 };
enum class Optimizer { adamw, lamb, lars };
// squared_relu: relu(x)^2, ungated like gelu (Nemotron-4; So et al. 2021, Primer).
enum class Activation { gelu, swiglu, squared_relu };
enum class Norm { layernorm, rmsnorm };
enum class PositionEmbedding { learned, rope };
enum class TpMode { d1, d2, d2_5, d3 };
enum class OffloadMode { none, optimizer, chunked };
// selective: Megatron-LM's (Korthikanti et al. 2022), the attention core replayed;
// selective_op: torchtitan's op-level policy, which saves every matmul's output but each
// second one (in the block's call order) and the attention kernel's, and replays the rest.
enum class Recompute { none, selective, full, selective_op };
enum class Schedule { gpipe, one_f_one_b, interleaved };
enum class Topology { fat_tree, torus, dragonfly };
// How a block's kernels run: attention as GEMMs around a softmax whose (seq x seq)
// probabilities are a tensor (unfused), or flash-style, never storing the scores (fused).
enum class Kernels { unfused, fused };
// Which framework's kernels a GPU run executes (TrainSpec::framework says how each is read).
enum class Framework { pytorch, megatron, torch_compile };

template <typename Enum>
struct EnumNames;  // specialised below: static constexpr std::array names

#define TESSEL_ENUM_NAMES(Enum, ...)                                   \
  template <>                                                          \
  struct EnumNames<Enum> {                                             \
    static constexpr std::array names{__VA_ARGS__};                    \
  };

TESSEL_ENUM_NAMES(Precision, std::string_view("fp32"), std::string_view("bf16"),
                  std::string_view("fp16"), std::string_view("fp8"))
TESSEL_ENUM_NAMES(Optimizer, std::string_view("adamw"), std::string_view("lamb"),
                  std::string_view("lars"))
TESSEL_ENUM_NAMES(Activation, std::string_view("gelu"), std::string_view("swiglu"),
                  std::string_view("squared-relu"))
TESSEL_ENUM_NAMES(Norm, std::string_view("layernorm"), std::string_view("rmsnorm"))
TESSEL_ENUM_NAMES(PositionEmbedding, std::string_view("learned"), std::string_view("rope"))
TESSEL_ENUM_NAMES(TpMode, std::string_view("1d"), std::string_view("2d"),
                  std::string_view("2.5d"), std::string_view("3d"))
TESSEL_ENUM_NAMES(OffloadMode, std::string_view("none"), std::string_view("optimizer"),
                  std::string_view("chunked"))
TESSEL_ENUM_NAMES(Recompute, std::string_view("none"), std::string_view("selective"),
                  std::string_view("full"), std::string_view("selective-op"))
TESSEL_ENUM_NAMES(Schedule, std::string_view("gpipe"), std::string_view("1f1b"),
                  std::string_view("interleaved"))
TESSEL_ENUM_NAMES(Topology, std::string_view("fat-tree"), std::string_view("torus"),
                  std::string_view("dragonfly"))
TESSEL_ENUM_NAMES(Kernels, std::string_view("unfused"), std::string_view("fused"))
TESSEL_ENUM_NAMES(Framework, std::string_view("pytorch"), std::string_view("megatron"),
                  std::string_view("torch.compile"))
#undef TESSEL_ENUM_NAMES

template <typename Enum>
constexpr std::string_view to_string(Enum value) {
  return EnumNames<Enum>::names[static_cast<std::size_t>(value)];
}

template <typename Enum>
std::optional<Enum> enum_from_string(std::string_view text) {
  const auto& names = EnumNames<Enum>::names;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == text) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

// "fp32|bf16|fp16", for messages and --help.
template <typename Enum>
std::string enum_choices() {
  std::string out;
  for (auto name : EnumNames<Enum>::names) {
    if (!out.empty()) out += '|';
    out += name;
  }
  return out;
}

// Bytes of one element stored in `precision` (fp32 4, bf16/fp16 2, fp8 1).
constexpr int element_bytes(Precision precision) {
  return precision == Precision::fp32 ? 4 : precision == Precision::fp8 ? 1 : 2;
}

// The precision a training precision keeps its weights, activations and non-GEMM ops
// in: itself, except fp8 training, which runs in bf16 outside its fp8 GEMMs (Megatron-LM
// --bf16 --fp8-format, NeMo bf16-mixed with fp8: true, torchtitan bf16 with float8).
constexpr Precision storage_precision(Precision precision) {
  return precision == Precision::fp8 ? Precision::bf16 : precision;
}

}  // namespace tessel
