// `tessel profile --backend cuda`: the part of the profile command that needs a GPU. It
// checks the device before the database is opened, so a machine without one gets one
// line, status 2 and no file.
#pragma once

#include <string>

namespace tessel::cli {

// Measures CUDA device `device` into the database at `db_path`.
int run_profile_cuda(const std::string& db_path, int device, bool quick);

}  // namespace tessel::cli
