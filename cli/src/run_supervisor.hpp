// How `tessel run` keeps its launcher (mpirun, srun) on a leash: the launcher runs in a
// process group of its own (so a signal reaches it and every local rank at once, and a
// terminal's Ctrl-C reaches only tessel, which decides). On SIGTERM, SIGINT or SIGHUP
// tessel asks the ranks to stop after their current step (SIGUSR1, which the launchers
// forward to every rank), and kills the group if it has not ended within a grace
// period, or at a second signal. std::system would not do: it ignores SIGINT while it
// waits. The launcher also gets a parent-death signal: tessel killed outright ends it.
// With a RankWatch (ranks on this machine), a rank that never starts, falls silent or
// ends without the launcher ending the job stops the job; and whatever ends the launcher,
// tessel waits for the ranks it leaves (a rank mid-checkpoint finishes its files) before
// it returns.
#pragma once

#include <string>
#include <vector>

namespace tessel::cli {

class RankWatch;

struct SupervisedExit {
  int status = 0;       // the launcher's exit status; 128 + the forwarded signal when there was one
  int forwarded = 0;    // the signal tessel received and forwarded (0: none)
  int killed_by = 0;    // the signal that ended the launcher itself (0: it exited)
  std::string watch_reason;  // why the watch stopped the job (empty: it did not)
  int ranks_outlived = 0;    // ranks still running when the launcher ended, waited for
};

// Runs argv[0] (looked up in PATH) with stdin from /dev/null and waits for it, watching
// the ranks through `watch` when given. Throws tessel::Error when it cannot start.
SupervisedExit run_supervised(const std::vector<std::string>& argv, unsigned grace_s, RankWatch* watch = nullptr);

// "status 153 (SIGXFSZ: File size limit exceeded)" for a status above 128, else "status N".
std::string describe_exit_status(int status);

}  // namespace tessel::cli
