// Reads one input file (plan, model, cluster, Hugging Face config, profile JSON,
// nccl-tests output) whole into memory, refusing up front what would make that go
// wrong: a missing file, a directory, a device or pipe (/dev/zero reads forever) and a
// file larger than limits::kMaxInputFileBytes. Every error is one line naming the file.
#pragma once

#include <cstdint>
#include <string>

#include "tessel/core/input_limits.hpp"

namespace tessel {

// The file's bytes; throws tessel::Error naming the file and what is wrong.
std::string read_input_file(const std::string& file_path,
                            std::int64_t max_bytes = limits::kMaxInputFileBytes);

// Throws tessel::Error when `path` exists but is not a regular file (a directory, a
// device, a pipe or a socket), naming what it is. A missing path passes.
void refuse_non_regular_file(const std::string& path);

}  // namespace tessel
