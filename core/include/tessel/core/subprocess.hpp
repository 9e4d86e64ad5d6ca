// Runs a shell command and captures its standard output (the profiler's mpirun, the
// planner's child simulations). Errors in starting it are tessel::Error.
#pragma once

#include <string>

namespace tessel {

// Returns everything the command wrote to stdout; `exit_status` gets its exit code
// (-1 when it did not exit normally).
std::string run_command(const std::string& command, int& exit_status);

// `text` as one shell word (single quotes, any ' inside escaped).
std::string shell_quote(const std::string& text);

}  // namespace tessel
