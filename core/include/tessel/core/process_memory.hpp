// What this process may still allocate, for the one line a failed allocation becomes
// (std::bad_alloc under `ulimit -v`, or a machine out of memory) and for refusing work
// up front that would not fit in it.
#pragma once

#include <string>

namespace tessel {

// Bytes this process may still map under its address-space limit (RLIMIT_AS, `ulimit -v`)
// beyond what it maps now; negative when there is no limit.
double address_space_left_bytes();

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
double available_memory_bytes();

// "out of memory: ..." naming the limit that was hit: the address-space limit with its
// size, else the machine's available memory (MemAvailable).
std::string out_of_memory_message();

}  // namespace tessel
