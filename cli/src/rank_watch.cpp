// RankWatch (rank_watch.hpp). A process's state comes from /proc/PID/stat (its third
// field: Z a zombie its parent has not reaped, T stopped by a signal); a beat's age from
// the heartbeat file's modification time against the wall clock, both of this machine.
#include "rank_watch.hpp"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/rank_heartbeat.hpp"

namespace tessel::cli {

namespace {
// The state letter of /proc/PID/stat, or 0 when the process is gone.
char process_state(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const std::size_t close = line.rfind(')');  // the name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : 0;
}

bool running(pid_t pid) {
  const char state = process_state(pid);
  return state != 0 && state != 'Z' && state != 'X';
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int rank : ranks) out += (out.empty() ? "" : ", ") + std::to_string(rank);
  return out;
}
}  // namespace

RankWatch::RankWatch(int world_size, std::string launcher)
    : launcher_(std::move(launcher)), ranks_(std::size_t(world_size)), started_(std::chrono::steady_clock::now()) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = fmt::format("{}/tessel-run-XXXXXX", tmp != nullptr && *tmp != '\0' ? tmp : "/tmp");
  if (::mkdtemp(pattern.data()) == nullptr) throw Error(fmt::format("run: cannot make a folder like {}", pattern));
  folder_ = pattern;
  if (const char* override_s = std::getenv("TESSEL_WATCHDOG_S")) {
    const double seconds = std::atof(override_s);
    if (seconds > 0) startup_s_ = silent_s_ = seconds;
  }
}

RankWatch::~RankWatch() {
  std::error_code ignored;
  std::filesystem::remove_all(folder_, ignored);
}

std::optional<RankWatch::Verdict> RankWatch::check() {
  const auto now = std::chrono::steady_clock::now();
  const double since_launch_s = std::chrono::duration<double>(now - started_).count();
  std::vector<int> unstarted, ended, silent;
  Verdict verdict;
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    const std::string file = executor::heartbeat_file(folder_, int(r));
    if (rank.pid == 0) {
      std::ifstream in(file);
      long pid = 0;
      if (!(in >> pid) || pid <= 0) {
        unstarted.push_back(int(r));
        continue;
      }
      rank.pid = pid_t(pid);
    }
    if (!running(rank.pid)) {
      if (!rank.ended_at) rank.ended_at = now;
      if (std::chrono::duration<double>(now - *rank.ended_at).count() > kSlowLauncher_s) ended.push_back(int(r));
      continue;
    }
    struct stat facts {};
    if (::stat(file.c_str(), &facts) == 0 && std::difftime(std::time(nullptr), facts.st_mtime) > silent_s_) {
      silent.push_back(int(r));
      verdict.rank_pids.push_back(rank.pid);
    }
  }
  if (!silent.empty()) {
    const bool stopped = process_state(ranks_[std::size_t(silent.front())].pid) == 'T';
    verdict.reason = fmt::format("rank {} (pid {}) has been silent for {:.0f} s{}; its peers would wait on it forever",
                                 rank_list(silent), ranks_[std::size_t(silent.front())].pid, silent_s_,
                                 stopped ? " (stopped by a signal)" : " (hung or stopped)");
  } else if (!ended.empty()) {
    verdict.reason = fmt::format("rank {} ended but {} did not stop the job within {:.0f} s", rank_list(ended),
                                 launcher_, kSlowLauncher_s);
  } else if (!unstarted.empty() && since_launch_s > startup_s_) {
    verdict.reason = fmt::format("rank {} did not start within {:.0f} s of the launch ({} could not start {})",
                                 rank_list(unstarted), startup_s_, launcher_, unstarted.size() == 1 ? "it" : "them");
  } else {
    return std::nullopt;
  }
  return verdict;
}

std::vector<pid_t> RankWatch::running_ranks() const {
  std::vector<pid_t> out;
  for (const Rank& rank : ranks_) {
    if (rank.pid != 0 && running(rank.pid)) out.push_back(rank.pid);
  }
  return out;
}

}  // namespace tessel::cli
