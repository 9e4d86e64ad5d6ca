// How `tessel run` keeps its launcher (mpirun, srun) on a leash: the launcher runs in a
// process group of its own (so a signal reaches it and every local rank at once, and a
// terminal's Ctrl-C reaches only tessel, which decides). On SIGTERM, SIGINT or SIGHUP
// tessel asks the ranks to stop after their current step (SIGUSR1, which the launchers
// forward to every rank), and kills the group if it has not ended within a grace
// period, or at a second signal. std::system would not do: it ignores SIGINT while it
// waits. The launcher also gets a parent-death signal: tessel killed outright ends it.
#pragma once

#include <string>
#include <vector>

namespace tessel::cli {

struct SupervisedExit {
  int status = 0;       // the launcher's exit status; 128 + the forwarded signal when there was one
  int forwarded = 0;    // the signal tessel received and forwarded (0: none)
};

// Runs argv[0] (looked up in PATH) with stdin from /dev/null and waits for it. Throws
// tessel::Error when it cannot start.
SupervisedExit run_supervised(const std::vector<std::string>& argv, unsigned grace_s);

}  // namespace tessel::cli
