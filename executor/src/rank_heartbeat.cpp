// rank_heartbeat.hpp: the file is written once and then only touched (futimens), so a
// beat costs one system call and never fills a disk or trips a file-size limit.
#include "tessel/executor/rank_heartbeat.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

std::string heartbeat_file(const std::string& folder, int rank) { return fmt::format("{}/rank-{}", folder, rank); }

void start_heartbeat(const std::string& folder, int rank) {
  const std::string path = heartbeat_file(folder, rank);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("--heartbeat-dir: {}: cannot write ({})", path, std::strerror(errno)));
  const std::string pid = fmt::format("{}\n", ::getpid());
  if (::write(fd, pid.data(), pid.size()) != ssize_t(pid.size())) {
    ::close(fd);
    throw Error(fmt::format("--heartbeat-dir: {}: cannot write ({})", path, std::strerror(errno)));
  }
  std::thread([fd] {
    const auto period = std::chrono::duration<double>(kHeartbeatPeriod_s);
    while (true) {
      std::this_thread::sleep_for(period);
      ::futimens(fd, nullptr);
    }
  }).detach();
}

}  // namespace tessel::executor
