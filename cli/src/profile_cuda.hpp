// `tessel profile --backend cuda`: the part of the profile command that needs a GPU. It
// checks the device before the database is opened, so a machine without one gets one
// line, status 2 and no file.
#pragma once

#include <functional>
#include <string>

#include "tessel/profiles/profile.hpp"
#include "tessel/profiles/profile_store.hpp"

namespace tessel::cli {

// (fraction done, what is being measured)
using ProfileProgress = std::function<void(double, const std::string&)>;

// What both profilers' commands do around the measuring: progress on stderr (a bar on a
// terminal, one line per point in a log, where a redrawn bar would be noise), the profile
// written into `store`, and one summary: samples, flagged ones, the device, what the
// profile says it did not measure, and how to see it. Defined in profile_command.cpp.
void measure_into(profiles::ProfileStore& store, const std::string& label,
                  const std::function<profiles::Profile(const ProfileProgress&)>& measure);

// Measures CUDA device `device` into the database at `db_path`.
int run_profile_cuda(const std::string& db_path, int device, bool quick);

}  // namespace tessel::cli
