// A Megatron-LM run is usually launched by a bash script: variables (TP=8), arrays of
// options (GPT_ARGS=( ... )), backslash continuations, comments, and one torchrun (or
// python) line that names pretrain_gpt.py and expands the arrays. This reads such a
// script as far as it can be read without running it: assignments, arrays, ${VAR},
// ${VAR:-default}, $((arithmetic)) and quoting are evaluated, and if blocks whose tests
// read only the script's variables (launch_conditions.hpp), while/for loops and case
// blocks over them and the positional arguments (launch_blocks.hpp); command substitution $(...)
// expands to nothing and is reported. A plain command line, or just the options, is a
// script of one line.
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
