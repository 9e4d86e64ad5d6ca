// The streams a rank's work runs on: the Program's ops are placed on them, the simulator
// replays one actor per stream, and the executor's backends run their work on them, so
// that compute and communication overlap the way the Program says.
#pragma once

#include <optional>
#include <string_view>

namespace tessel {

enum class Stream { compute, tp_comm, dp_comm, pp_comm, copy };
inline constexpr int kStreamCount = 5;
std::string_view to_string(Stream stream);
std::optional<Stream> stream_from_string(std::string_view name);  // nullopt: not a stream's name

}  // namespace tessel
