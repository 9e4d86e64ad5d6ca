// A whole file mapped read-only into memory, for token corpora larger than memory: the
// kernel pages the tokens in as windows read them and drops them under pressure. Held
// through a shared_ptr so that every TokenSource copy keeps the mapping alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tessel::executor {

class MappedFile {
 public:
  // Throws tessel::Error "--data: PATH: cannot open file" (or the system's reason).
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  std::uint64_t size_bytes() const { return size_bytes_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const std::byte* data, std::uint64_t size_bytes)
      : path_(std::move(path)), data_(data), size_bytes_(size_bytes) {}
  std::string path_;
  const std::byte* data_;
  std::uint64_t size_bytes_;
};

}  // namespace tessel::executor
