// For the fuzz targets whose readers take a path, not text (safetensors, token files,
// the corpus folder): a folder of this process's own, made once and removed at exit,
// and the fuzzer's bytes written into a file there. The folder is in memory where it
// can be (/dev/shm), and each file is a new one: ext4 flushes a file truncated and
// rewritten to disk on close, which made each input cost milliseconds.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace tessel_fuzz {

class ScratchFolder {
 public:
  ScratchFolder() {
    std::error_code no_shm;
    const std::filesystem::path base = ::access("/dev/shm", W_OK) == 0 && std::filesystem::is_directory("/dev/shm", no_shm)
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    std::string pattern = (base / "tessel-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchFolder() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  // `bytes` as the whole of file `name` in the folder; returns its path.
  std::string write(const std::string& name, const std::uint8_t* bytes, std::size_t size) const {
    const std::string file = (path_ / name).string();
    ::unlink(file.c_str());
    std::ofstream(file, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes),
                                                                 std::streamsize(size));
    return file;
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline const ScratchFolder& scratch() {
  static const ScratchFolder folder;
  return folder;
}

}  // namespace tessel_fuzz
