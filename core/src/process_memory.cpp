// process_memory.hpp from getrlimit and /proc (Linux): the mapped size of this process
// (/proc/self/statm, its first field in pages) and the machine's MemAvailable.
#include "tessel/core/process_memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace tessel {

namespace {
double gib(double bytes) { return bytes / double(1ULL << 30); }

double mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0;
  statm >> pages;
  return pages * double(sysconf(_SC_PAGE_SIZE));
}

}  // namespace

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    double kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024.0;
  }
  return 0;
}

double address_space_left_bytes() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return -1;
  return double(limit.rlim_cur) - mapped_bytes();
}

std::string out_of_memory_message() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    return fmt::format("out of memory: an allocation failed beyond this process's address-space limit of {:.2f} GiB "
                       "(ulimit -v {}); raise it or give the work less to hold",
                       gib(double(limit.rlim_cur)), limit.rlim_cur / 1024);
  }
  return fmt::format("out of memory: an allocation failed with {:.2f} GiB of this machine's memory available; give "
                     "the work less to hold",
                     gib(available_memory_bytes()));
}

}  // namespace tessel
