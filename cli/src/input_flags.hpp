// The command line's search inputs (planner/search_inputs.hpp, shared with the GUI) as
// options of the commands that take model, cluster and batch from flags, and the --db
// option every command that reads profiles takes. Kept apart from the commands so that
// commands.cpp stays one file's worth.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tessel/core/input_limits.hpp"
#include "tessel/planner/search_inputs.hpp"

namespace tessel::cli {

inline void add_db_option(CLI::App* command, std::string& db) {
  command->add_option("--db", db,
                      "Profile database (default: $TESSEL_DB, else ~/.local/share/tessel/tessel.db); devices it "
                      "does not hold use the shipped datasheet profiles");
}

// --seq given must be a length: 0 is not a way to ask for the model's own (leave it out).
inline CLI::Validator positive_seq_len() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::int64_t value = 0;
        std::size_t used = 0;
        try {
          value = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == text.size() && value > 0 && value <= limits::kMaxSeqLen) return {};
        return fmt::format("must be a positive integer up to {} (leave --seq out for the model's own), got {}",
                           limits::kMaxSeqLen, text);
      },
      fmt::format("INT in 1..{}", limits::kMaxSeqLen));
}

// Options shared by the commands that take model, cluster and batch from flags.
// The search inputs (planner/search_inputs.hpp, shared with the GUI) as options.
struct InputFlags : planner::SearchInputs {
  void add_to(CLI::App* command, bool batch_required) {
    command->add_option("--model,-m", model, "Model preset (tessel presets models), tessel model JSON, or HF config.json")
        ->required();
    command->add_option("--cluster,-c", cluster, "Cluster preset (tessel presets clusters) or cluster JSON")->required();
    auto* batch = command->add_option("--global-batch,-b", global_batch, "Sequences per optimizer step");
    if (batch_required) batch->required();
    command->add_option("--seq", seq, "Sequence length (default: the model's)")->check(positive_seq_len());
    command->add_option("--precision", precision, "Training precision (fp8: Transformer Engine's fp8 linears)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}))
        ->capture_default_str();
    command->add_option("--optimizer", optimizer, "Optimizer")
        ->check(CLI::IsMember({"adamw", "lamb", "lars"}))
        ->capture_default_str();
    command->add_option("--kernels", kernels,
                        "Attention kernels: unfused (materialised scores) or fused (flash-style, no scores kept)")
        ->check(CLI::IsMember({"unfused", "fused"}))
        ->capture_default_str();
    command->add_option("--framework", framework,
                        "Whose kernels run the plan, for a calibrated profile's corrections: pytorch (eager), megatron "
                        "(Megatron-LM, NeMo) or torch.compile")
        ->check(CLI::IsMember({"pytorch", "megatron", "torch.compile"}))
        ->capture_default_str();
    command->add_option("--ranks", ranks, "World size for clusters whose node size follows the plan (local-cpu)");
    add_db_option(command, db);
  }
};

}  // namespace tessel::cli
