// What torchtitan's two writers share (TOML in torchtitan_writer.cpp, config_registry.py in
// torchtitan_registry_writer.cpp): the nearest plan torchtitan runs, its schedule names and
// the spelling of tessel's pipeline split.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tessel/interop/engine_config.hpp"

namespace tessel::interop::detail {

// The nearest plan torchtitan can run in `form`, each change a line of `notes`.
Plan nearest_torchtitan_plan(const Plan& plan, TorchtitanForm form, std::vector<std::string>& notes);

// "GPipe", "1F1B", "Interleaved1F1B".
const char* torchtitan_schedule_name(Schedule schedule);

struct TorchtitanSplit {
  int layers_per_stage = 0;  // pipeline_parallel_layers_per_stage; 0: not written (one chunk per stage)
  int first_less = 0;        // pipeline_parallel_first_stage_less_layers
  int last_less = 0;         // pipeline_parallel_last_stage_less_layers
};
TorchtitanSplit torchtitan_split(const Plan& near);

// ParallelismConfig's options for `near` in `form`, in the order both forms write them, each
// value spelled as TOML and Python both read it (the registry's one boolean is Python's).
std::vector<std::pair<std::string, std::string>> torchtitan_parallelism(const Plan& near, TorchtitanForm form);

// Adds to `notes` the note for a model that is not a torchtitan flavor (nothing when it is
// one); `how_to_register` says what the user adds to torchtitan for its shape.
void note_unknown_torchtitan_model(const Plan& near, const std::string& how_to_register,
                                   std::vector<std::string>& notes);

// The # lines both forms open with: `what` tessel wrote for which plan, then each note.
std::string torchtitan_opening(const std::string& what, const Plan& near, const std::vector<std::string>& notes);

}  // namespace tessel::interop::detail
