// `tessel run`'s watch over the ranks it launched on its own machine, through their heartbeats
// (executor/rank_heartbeat.hpp): every rank beats within kStartup_s of the launch, none stays
// silent for kSilent_s (a hung rank's peers would spin forever), and a rank whose process ended
// leaves mpirun kSlowLauncher_s to end the job first. TESSEL_WATCHDOG_S=N sets the first two.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tessel::cli {

class RankWatch {
 public:
  static constexpr double kStartup_s = 60, kSilent_s = 30, kSlowLauncher_s = 10;

  // Makes the heartbeat folder (under $TMPDIR) for `world_size` ranks launched by `launcher`.
  RankWatch(int world_size, std::string launcher);
  ~RankWatch();  // removes the folder
  RankWatch(const RankWatch&) = delete;
  RankWatch& operator=(const RankWatch&) = delete;

  const std::string& folder() const { return folder_; }

  struct Verdict {
    std::string reason;              // one line naming the ranks, for the user and the runs database
    std::vector<pid_t> rank_pids;    // silent ranks, to kill outright: a stopped process answers nothing else
  };
  // Why the job must stop now; nullopt while every rank is well.
  std::optional<Verdict> check();
  // The pids of ranks whose processes still run (zombies excluded).
  std::vector<pid_t> running_ranks() const;

 private:
  struct Rank {
    pid_t pid = 0;  // 0 until its heartbeat file names it
    std::optional<std::chrono::steady_clock::time_point> ended_at;
  };
  std::string folder_, launcher_;
  std::vector<Rank> ranks_;
  std::chrono::steady_clock::time_point started_;
  double startup_s_ = kStartup_s, silent_s_ = kSilent_s;
};

}  // namespace tessel::cli
