// Forked simulations (simulate_forked.hpp). Each child writes one line into its pipe:
// "ok <step_time_s> <wall_s> <cpu_s>" in hexadecimal floating point (exact, so the parent sees
// the child's bits), or "error <message>". Children leave through _exit so that they
// flush nothing of the parent's buffers and run none of its exit handlers. The parent
// polls its own children by pid, never waitpid(-1), so it reaps no one else's.
#include "simulate_forked.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/program.hpp"
#include "tessel/simulator/simulation.hpp"

namespace tessel::cli {

namespace {
struct Child {
  pid_t pid = -1;
  int read_fd = -1;
  std::size_t job = 0;
};

[[noreturn]] void run_child(const SimulationJob& job, int write_fd) {
  std::string line;
  try {
    const Program program = Program::lower(*job.plan);
    const simulator::SimulationResult result = simulator::simulate(program, job.profile, {});
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    const double cpu_s = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                         1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
    line = fmt::format("ok {:a} {:a} {:a}\n", result.step_time_s, result.wall_s, cpu_s);
  } catch (const std::exception& e) {
    line = fmt::format("error {}\n", e.what());
  }
  std::size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(write_fd, line.data() + written, line.size() - written);
    if (n <= 0) break;
    written += std::size_t(n);
  }
  ::close(write_fd);
  ::_exit(0);
}

Child start_child(const std::vector<SimulationJob>& jobs, std::size_t job) {
  int fds[2];
  if (::pipe(fds) != 0) throw Error("simulate: cannot create a pipe for a child simulation");
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]), ::close(fds[1]);
    throw Error("simulate: cannot fork a child simulation");
  }
  if (pid == 0) {
    ::close(fds[0]);
    run_child(jobs[job], fds[1]);
  }
  ::close(fds[1]);
  return Child{pid, fds[0], job};
}

// Everything the child wrote, once it has exited (a line is far below a pipe's buffer,
// so the child never blocks on it).
std::string read_all(int fd) {
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    text.append(buffer, std::size_t(n));
  }
  ::close(fd);
  return text;
}

// The parsed line; an error's message in `failure`.
SimulatedStep parse_child_line(const std::string& text, int status, std::string& failure) {
  SimulatedStep step;
  if (text.rfind("ok ", 0) == 0) {
    char* end = nullptr;
    step.step_time_s = std::strtod(text.c_str() + 3, &end);
    step.wall_s = std::strtod(end, &end);
    step.cpu_s = std::strtod(end, nullptr);
    if (step.step_time_s > 0) return step;
  }
  if (text.rfind("error ", 0) == 0) {
    failure = text.substr(6);
    while (!failure.empty() && failure.back() == '\n') failure.pop_back();
  } else {
    failure = WIFSIGNALED(status) ? fmt::format("the child simulation died of signal {}", WTERMSIG(status))
                                  : "the child simulation wrote no result";
  }
  return step;
}
}  // namespace

std::vector<SimulatedStep> simulate_forked(const std::vector<SimulationJob>& jobs, int parallel,
                                           const SimulationProgress& progress) {
  std::vector<SimulatedStep> out(jobs.size());
  std::vector<std::string> failures(jobs.size());
  std::vector<Child> running;
  std::size_t next = 0, done = 0;
  const std::size_t most = std::size_t(std::max(1, parallel));
  while (done < jobs.size()) {
    try {
      while (running.size() < most && next < jobs.size()) running.push_back(start_child(jobs, next++));
    } catch (const Error&) {
      // No half-finished batch left behind: the children already started are stopped and reaped.
      for (const Child& child : running) {
        ::kill(child.pid, SIGKILL);
        int status = 0;
        ::waitpid(child.pid, &status, 0);
        ::close(child.read_fd);
      }
      throw;
    }
    bool reaped = false;
    for (std::size_t i = 0; i < running.size(); ++i) {
      int status = 0;
      const pid_t ended = ::waitpid(running[i].pid, &status, WNOHANG);
      if (ended == 0) continue;
      const Child child = running[i];
      running.erase(running.begin() + std::ptrdiff_t(i));
      out[child.job] = parse_child_line(read_all(child.read_fd), status, failures[child.job]);
      ++done;
      if (progress) progress(child.job, done, out[child.job]);
      reaped = true;
      break;
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (!failures[i].empty()) {
      throw Error(fmt::format("simulating {} on {} x {} failed: {}", jobs[i].plan->parallel.summary(),
                              jobs[i].plan->nodes, jobs[i].plan->cluster.name, failures[i]));
    }
  }
  return out;
}

}  // namespace tessel::cli
