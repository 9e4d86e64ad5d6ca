// How `tessel run` keeps its launcher on a leash: the launcher gets its own process group (a
// signal reaches every local rank at once; Ctrl-C reaches only tessel) and a parent-death signal.
// On SIGTERM/SIGINT/SIGHUP the ranks are asked to stop after their step (SIGUSR1), the group killed
// after a grace period or a second signal (std::system ignores SIGINT while waiting, so it would
// not do). A RankWatch stops a job whose rank dies or hangs; tessel waits for every rank it leaves.
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
