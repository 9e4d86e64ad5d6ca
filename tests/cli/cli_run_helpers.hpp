// What the tests of `tessel run`'s life share: the smallest plan that trains on two
// ranks, waiting for a process with a deadline, whether a test's ranks still run, and the
// one run a test's database holds, starting a command in the background and waiting for
// what it prints. Nothing here asserts but the deadline.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "cli_fixture.hpp"
#include "tessel/profiles/run_store.hpp"

namespace tessel_cli_test {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline tessel::profiles::RunRecord only_run(const std::string& db) {
  tessel::profiles::ProfileStore store(db);
  tessel::profiles::RunStore runs(store);
  const auto all = runs.runs();
  EXPECT_EQ(all.size(), 1u);
  return all.empty() ? tessel::profiles::RunRecord{} : all.front();
}

// `pid`'s wait status, killing it (and failing) when it has not ended within `limit_s`.
// `command` started by sh in a child process (exec'd, so the child is the command): its
// process id, or -1 when fork failed.
inline pid_t start_in_shell(const std::string& command) {
  const pid_t child = fork();
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return child;
}

// Polls `file` every 50 ms until it holds `text` or `limit_s` have passed: whether it does.
inline bool file_comes_to_hold(const std::filesystem::path& file, const std::string& text, double limit_s) {
  const auto start = std::chrono::steady_clock::now();
  while (slurp(file).find(text) == std::string::npos && seconds_since(start) < limit_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return slurp(file).find(text) != std::string::npos;
}

inline int wait_at_most(pid_t pid, double limit_s) {
  const auto start = std::chrono::steady_clock::now();
  int raw = 0;
  while (waitpid(pid, &raw, WNOHANG) == 0) {
    if (seconds_since(start) > limit_s) {
      ADD_FAILURE() << "still running after " << limit_s << " s";
      kill(pid, SIGKILL);
      waitpid(pid, &raw, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return raw;
}

// Whether any tessel-rank process names `marker` (a test's own folder) on its command line.
inline bool ranks_alive(const std::string& marker) {
  const std::string command = "pgrep -f '[t]essel-rank.*" + marker + "' >/dev/null";
  return std::system(command.c_str()) == 0;
}

}  // namespace tessel_cli_test
