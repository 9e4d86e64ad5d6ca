// The safetensors format (Hugging Face's tensor container), in a few lines rather than a library:
// an 8-byte little-endian header length, a JSON header (dtype, shape, data_offsets per tensor,
// __metadata__), then the row-major bytes. The writer pads the header to 8-byte alignment and
// writes via a temporary file, fsync and rename; the reader checks every length, dtype, shape and
// range (contiguous, non-overlapping, covering the data), one line naming file and tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessel::executor {

// The element types tessel writes and reads.
enum class SafetensorsDType { f32, bf16 };
const char* to_string(SafetensorsDType dtype);
std::size_t element_bytes(SafetensorsDType dtype);

// One tensor to write: fp32 values, stored as `dtype` (bf16 rounds to nearest even).
struct SafetensorsOutput {
  std::string name;
  std::vector<std::int64_t> shape;
  const float* values = nullptr;  // shape's product of them
};

// Writes `tensors` (in this order) to `path` atomically. Throws tessel::Error naming the file.
void write_safetensors(const std::string& path, const std::vector<SafetensorsOutput>& tensors,
                       SafetensorsDType dtype, const std::map<std::string, std::string>& metadata);

// A parsed, validated file: its header in memory, each tensor's bytes read on demand.
class SafetensorsFile {
 public:
  struct Entry {
    std::string dtype;  // as written ("F32", "BF16", "F16", "I64", ...)
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0;  // in the data section
  };
  // Reads and validates `path`; errors are "<option>: <path>: ..." in one line.
  static SafetensorsFile read(const std::string& path, const std::string& option);

  const std::string& path() const { return path_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's values as fp32, read from the file now (F32 or BF16 only; the caller
  // checks the dtype first).
  std::vector<float> values(const std::string& name) const;

 private:
  std::string path_;
  std::uint64_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tessel::executor
