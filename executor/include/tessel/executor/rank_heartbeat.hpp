// A rank's sign of life to the `tessel run` that launched it on the same machine: the file
// rank-R holding its pid, its modification time renewed every second by a thread of its own
// (so a long step keeps beating). No file: never started; process gone: ended; file stale:
// stopped or hung. The launcher's side is cli/src/rank_watch.hpp.
#pragma once

#include <string>

namespace tessel::executor {

inline constexpr double kHeartbeatPeriod_s = 1.0;

// The heartbeat file of `rank` in `folder`.
std::string heartbeat_file(const std::string& folder, int rank);

// Writes this process's pid to heartbeat_file(folder, rank) and renews its modification
// time every kHeartbeatPeriod_s from a detached thread until the process ends. Throws
// tessel::Error when the file cannot be written.
void start_heartbeat(const std::string& folder, int rank);

}  // namespace tessel::executor
