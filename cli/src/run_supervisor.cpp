// The supervised launch of run_supervisor.hpp. Only async-signal-safe calls happen in the
// handlers (kill, alarm); the waiting loop restarts waitpid after each interruption, and
// with a RankWatch polls it (every 200 ms) between the watch's checks.
// mpirun puts each rank in a process group of its own, so the ranks are reached through
// the launcher's forwarding (and their parent-death signal), not through its group.
#include "run_supervisor.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "rank_watch.hpp"
#include "tessel/core/error.hpp"

namespace tessel::cli {

namespace {
volatile std::sig_atomic_t g_group = 0;      // the launcher's process group
volatile std::sig_atomic_t g_forwarded = 0;  // the first signal forwarded
volatile std::sig_atomic_t g_grace_s = 10;

// The first signal asks the ranks to stop after their step (and checkpoint): SIGUSR1,
// which mpirun and srun forward to every rank. A second one, or the grace period
// running out, ends the launcher's group: SIGTERM, then SIGKILL.
extern "C" void forward_signal(int signal) {
  if (g_forwarded == 0) {
    g_forwarded = signal;
    if (g_group > 0) kill(-pid_t(g_group), SIGUSR1);
    alarm(unsigned(g_grace_s));
  } else if (g_group > 0) {
    kill(-pid_t(g_group), SIGTERM);
  }
}
extern "C" void grace_over(int) {
  if (g_group > 0) kill(-pid_t(g_group), SIGKILL);
}

void install(int signal, void (*handler)(int)) {
  struct sigaction action{};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, nullptr);
}

// Waits at most `grace_s` for the watched ranks (not tessel's children: mpirun's) to end,
// then kills those left.
void wait_for_ranks(RankWatch& watch, unsigned grace_s) {
  const auto start = std::chrono::steady_clock::now();
  while (!watch.running_ranks().empty() &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(grace_s)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (pid_t pid : watch.running_ranks()) kill(pid, SIGKILL);
}
}  // namespace

std::string describe_exit_status(int status) {
  const int signal = status - 128;
  if (signal <= 0 || signal >= NSIG || sigabbrev_np(signal) == nullptr) return fmt::format("status {}", status);
  return fmt::format("status {} (SIG{}: {})", status, sigabbrev_np(signal), strsignal(signal));
}

SupervisedExit run_supervised(const std::vector<std::string>& argv, unsigned grace_s, RankWatch* watch) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  g_grace_s = std::sig_atomic_t(grace_s);
  std::fflush(nullptr);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) throw Error(fmt::format("run: cannot start {}: {}", argv.at(0), std::strerror(errno)));
  if (child == 0) {
    setpgid(0, 0);
    // tessel killed outright (SIGKILL) still ends the launcher, which ends its ranks.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);
    // A process group in the background must not read the terminal (SIGTTIN would stop it).
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    execvp(args[0], args.data());
    std::fprintf(stderr, "tessel: error: run: cannot start %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(child, child);  // also here: whichever of the two runs first
  g_group = child;
  for (int signal : {SIGTERM, SIGINT, SIGHUP}) install(signal, forward_signal);
  install(SIGALRM, grace_over);
  int raw = 0;
  SupervisedExit out;
  while (true) {
    const pid_t done = waitpid(child, &raw, watch != nullptr ? WNOHANG : 0);
    if (done == child || (done < 0 && errno != EINTR)) break;
    if (watch == nullptr) continue;  // waitpid blocked: a signal interrupted it
    if (out.watch_reason.empty()) {
      if (const auto verdict = watch->check()) {
        out.watch_reason = verdict->reason;
        for (pid_t pid : verdict->rank_pids) kill(pid, SIGKILL);
        kill(-child, SIGTERM);
        alarm(grace_s);  // then SIGKILL (grace_over)
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  alarm(0);
  // Ranks the launcher left behind in its group (it should not, but a leash is a leash).
  kill(-child, SIGKILL);
  g_group = 0;
  for (int signal : {SIGTERM, SIGINT, SIGHUP, SIGALRM}) install(signal, SIG_DFL);
  // Ranks the launcher left (it was killed, or ended early): each may be writing a
  // checkpoint its parent-death signal asked for; tessel returns after them.
  if (watch != nullptr) {
    out.ranks_outlived = int(watch->running_ranks().size());
    wait_for_ranks(*watch, std::max(grace_s, 30u));
  }
  out.forwarded = int(g_forwarded);
  out.killed_by = WIFSIGNALED(raw) ? WTERMSIG(raw) : 0;
  out.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + out.killed_by;
  if (out.forwarded != 0) out.status = 128 + out.forwarded;  // as if the signal had ended tessel
  return out;
}

}  // namespace tessel::cli
