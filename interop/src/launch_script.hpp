// A Megatron-LM launch script (variables, option arrays, continuations, one torchrun or
// python line naming pretrain_gpt.py) read as far as it can be without running it:
// assignments, ${VAR}, ${VAR:-default}, $((...)) and quoting are evaluated, as are if blocks
// (launch_conditions.hpp), loops and case blocks (launch_blocks.hpp) over its variables and
// arguments; $(...) expands to nothing and is reported. A command line is a one-line script.
#pragma once

#include <string>
#include <vector>

namespace tessel::interop::detail {

struct LaunchCommand {
  // The words after the training program (pretrain_gpt.py), or every word when the text
  // names no program.
  std::vector<std::string> args;
  std::string program;  // "pretrain_gpt.py", or "" when none was named
  // From torchrun's --nproc_per_node / --nnodes (0 = not given or not a number).
  int nproc_per_node = 0;
  int nnodes = 0;
  // What the reader could not evaluate (each one line), for the ignored list.
  std::vector<std::string> notes;
};

// Throws tessel::Error "<source>: line N: ..." for what cannot be evaluated. `positional`:
// the script's arguments ($1, $2, ..., $#, $@; shift drops them), none by default.
LaunchCommand read_launch_script(const std::string& text, const std::string& source,
                                 const std::vector<std::string>& positional = {});

}  // namespace tessel::interop::detail
