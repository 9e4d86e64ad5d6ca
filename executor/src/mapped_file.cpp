#include "mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("--data: {}: cannot open file", path));
  struct stat facts {};
  if (::fstat(fd, &facts) != 0 || !S_ISREG(facts.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("--data: {}: cannot open file", path));
  }
  const auto size_bytes = std::uint64_t(facts.st_size);
  const std::byte* data = nullptr;
  if (size_bytes > 0) {  // mmap refuses a length of 0; an empty file is reported by its reader
    void* mapped = ::mmap(nullptr, size_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
      const int why = errno;
      ::close(fd);
      throw Error(fmt::format("--data: {}: cannot map file ({})", path, std::strerror(why)));
    }
    data = static_cast<const std::byte*>(mapped);
  }
  ::close(fd);  // the mapping outlives the descriptor
  return std::shared_ptr<const MappedFile>(new MappedFile(path, data, size_bytes));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_bytes_);
}

}  // namespace tessel::executor
