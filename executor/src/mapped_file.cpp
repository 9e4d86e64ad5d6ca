// MappedFile, and what happens when a mapped file shrinks under the run (truncated,
// rewritten by another job): reading a page past its new end raises SIGBUS. The handler
// looks the faulting address up among the live mappings and ends the process with one
// line naming the file and status 2; a fault elsewhere keeps the default action.
#include "mapped_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

namespace {
// The live mappings, readable from a signal handler: fixed slots, atomics only.
struct MappedRegion {
  std::atomic<const std::byte*> begin{nullptr};
  std::atomic<std::uint64_t> bytes{0};
  std::array<char, 1024> message{};  // the whole error line, written once before `begin`
  std::atomic<std::size_t> message_bytes{0};
};
std::array<MappedRegion, 64> g_regions;
std::mutex g_regions_mutex;
struct sigaction g_previous_bus_action {};

extern "C" void on_bus_error(int signal, siginfo_t* info, void* context) {
  const auto* at = static_cast<const std::byte*>(info->si_addr);
  for (const MappedRegion& region : g_regions) {
    const std::byte* begin = region.begin.load();
    if (begin != nullptr && at >= begin && at < begin + region.bytes.load()) {
      [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, region.message.data(), region.message_bytes.load());
      ::_exit(2);
    }
  }
  // Not a mapped token file: what would have happened without this handler.
  if (g_previous_bus_action.sa_flags & SA_SIGINFO) {
    if (g_previous_bus_action.sa_sigaction != nullptr) return g_previous_bus_action.sa_sigaction(signal, info, context);
  } else if (g_previous_bus_action.sa_handler != SIG_DFL && g_previous_bus_action.sa_handler != SIG_IGN) {
    return g_previous_bus_action.sa_handler(signal);
  }
  ::signal(SIGBUS, SIG_DFL);  // the faulting read runs again and ends the process as before
}

void watch(const std::byte* begin, std::uint64_t bytes, const std::string& path) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = on_bus_error;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_bus_action);
  });
  const std::lock_guard<std::mutex> lock(g_regions_mutex);
  for (MappedRegion& region : g_regions) {
    if (region.begin.load() != nullptr) continue;
    const std::string line = fmt::format(
        "tessel: error: --data: {}: the file shrank while the run read it (truncated or rewritten under the run); "
        "stopping\n",
        path);
    const std::size_t size = std::min(line.size(), region.message.size());
    std::memcpy(region.message.data(), line.data(), size);
    region.message_bytes = size;
    region.bytes = bytes;
    region.begin = begin;
    return;
  }
  // More than 64 files mapped at once: this one faults with the default action.
}

void unwatch(const std::byte* begin) {
  const std::lock_guard<std::mutex> lock(g_regions_mutex);
  for (MappedRegion& region : g_regions) {
    if (region.begin.load() == begin) region.begin = nullptr;
  }
}
}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("--data: {}: cannot open file", path));
  struct stat facts {};
  if (::fstat(fd, &facts) != 0 || !S_ISREG(facts.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("--data: {}: cannot open file", path));
  }
  const auto size_bytes = std::uint64_t(facts.st_size);
  const std::byte* data = nullptr;
  if (size_bytes > 0) {  // mmap refuses a length of 0; an empty file is reported by its reader
    void* mapped = ::mmap(nullptr, size_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
      const int why = errno;
      ::close(fd);
      throw Error(fmt::format("--data: {}: cannot map file ({})", path, std::strerror(why)));
    }
    data = static_cast<const std::byte*>(mapped);
    watch(data, size_bytes, path);
  }
  ::close(fd);  // the mapping outlives the descriptor
  return std::shared_ptr<const MappedFile>(new MappedFile(path, data, size_bytes));
}

MappedFile::~MappedFile() {
  if (data_ == nullptr) return;
  unwatch(data_);
  ::munmap(const_cast<std::byte*>(data_), size_bytes_);
}

}  // namespace tessel::executor
