// Input files are checked by type and size before a byte is read, and read with a hard
// cap even then (a file may grow while it is read), so no input can make tessel read
// forever or exhaust memory.
#include "tessel/core/input_file.hpp"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel {

namespace fs = std::filesystem;

void refuse_non_regular_file(const std::string& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || status.type() == fs::file_type::not_found || status.type() == fs::file_type::regular) return;
  if (status.type() == fs::file_type::directory) {
    throw Error(fmt::format("{}: is a directory, not a file", path));
  }
  throw Error(fmt::format("{}: not a regular file (a device, pipe or socket); give a file", path));
}

std::string read_input_file(const std::string& file_path, std::int64_t max_bytes) {
  refuse_non_regular_file(file_path);
  std::error_code error;
  if (!fs::exists(file_path, error)) throw Error(fmt::format("{}: cannot open file (no such file)", file_path));
  const auto too_large = [&](std::int64_t size_bytes) {
    return Error(fmt::format("{}: {} bytes, more than the {} bytes tessel reads from an input file", file_path,
                             size_bytes, max_bytes));
  };
  const auto size_bytes = fs::file_size(file_path, error);
  if (!error && std::int64_t(size_bytes) > max_bytes) throw too_large(std::int64_t(size_bytes));
  std::ifstream in(file_path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open file", file_path));
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) {
    text.append(chunk, std::size_t(in.gcount()));
    if (std::int64_t(text.size()) > max_bytes) throw too_large(std::int64_t(text.size()));
  }
  if (in.bad()) throw Error(fmt::format("{}: read failed", file_path));
  return text;
}

}  // namespace tessel
