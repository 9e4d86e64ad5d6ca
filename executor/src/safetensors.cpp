// safetensors.hpp's writer and reader. The format's layout and rules follow the
// safetensors project's own description (an 8-byte header size N, N bytes of JSON,
// the byte buffer; data_offsets relative to the buffer; the header may end in spaces);
// the code is tessel's own.
#include "tessel/executor/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/json_fields.hpp"
#include "tessel/executor/checkpoint_files.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::executor {

namespace {
constexpr std::uint64_t kMaxHeaderBytes = 100ULL << 20;  // the reference implementation's bound

// Bytes per element of every dtype the format names (those a reader may meet).
std::size_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, std::size_t, std::less<>> kBytes{
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2},
      {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},     {"I64", 8}, {"U64", 8}, {"F64", 8}};
  const auto found = kBytes.find(dtype);
  return found == kBytes.end() ? 0 : found->second;
}

// A header value for an error line: at most 60 characters of it.
std::string shown(const Json& value) {
  const std::string text = value.dump();
  return text.size() <= 60 ? text : text.substr(0, 60) + "...";
}

void put_u64_le(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(char((value >> (8 * i)) & 0xff));
}

class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), temporary_(path_ + ".tmp") {
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(fmt::format("--out: {}: cannot write ({})", temporary_, std::strerror(errno)));
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) std::filesystem::remove(temporary_, ignored_);
  }
  void write(const void* data, std::size_t size) {
    const char* at = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t written = ::write(fd_, at, size);
      if (written <= 0) throw Error(fmt::format("--out: {}: write failed ({})", temporary_, std::strerror(errno)));
      at += written;
      size -= std::size_t(written);
    }
  }
  void commit() {
    if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
      fd_ = -1;
      throw Error(fmt::format("--out: {}: cannot flush to disk ({})", temporary_, std::strerror(errno)));
    }
    fd_ = -1;
    std::error_code error;
    std::filesystem::rename(temporary_, path_, error);
    if (error) throw Error(fmt::format("--out: {}: cannot rename into place ({})", path_, error.message()));
    committed_ = true;
    fsync_path(std::filesystem::absolute(path_).parent_path().string());
  }

 private:
  std::string path_, temporary_;
  int fd_ = -1;
  bool committed_ = false;
  std::error_code ignored_;
};

std::uint64_t element_count(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= std::uint64_t(d);
  return n;
}
}  // namespace

const char* to_string(SafetensorsDType dtype) { return dtype == SafetensorsDType::f32 ? "F32" : "BF16"; }
std::size_t element_bytes(SafetensorsDType dtype) { return dtype == SafetensorsDType::f32 ? 4 : 2; }

void write_safetensors(const std::string& path, const std::vector<SafetensorsOutput>& tensors, SafetensorsDType dtype,
                       const std::map<std::string, std::string>& metadata) {
  // nlohmann's ordered_json keeps the tensors in file order, which readers show.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const SafetensorsOutput& t : tensors) {
    const std::uint64_t bytes = element_count(t.shape) * element_bytes(dtype);
    header[t.name] = {{"dtype", to_string(dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string prefix;
  put_u64_le(prefix, text.size());
  AtomicFile file(path);
  file.write(prefix.data(), prefix.size());
  file.write(text.data(), text.size());
  std::vector<std::uint16_t> halves;
  for (const SafetensorsOutput& t : tensors) {
    const std::size_t n = std::size_t(element_count(t.shape));
    if (dtype == SafetensorsDType::f32) {
      file.write(t.values, n * sizeof(float));  // x86-64 and aarch64 Linux are little-endian
      continue;
    }
    halves.resize(n);
    for (std::size_t i = 0; i < n; ++i) halves[i] = kernels::numeric::to_bf16(t.values[i]);
    file.write(halves.data(), n * sizeof(std::uint16_t));
  }
  file.commit();
}

SafetensorsFile SafetensorsFile::read(const std::string& path, const std::string& option) {
  auto fail = [&](const std::string& message) -> Error {
    return Error(fmt::format("{}: {}: {}", option, path, message));
  };
  SafetensorsFile f;
  f.path_ = path;
  // Only the header is read here; values() reads a tensor's bytes when asked, so a rank
  // reads the tensors it needs and holds no second copy of the file.
  std::error_code error;
  std::ifstream in(path, std::ios::binary);
  const std::uint64_t file_bytes = std::filesystem::file_size(path, error);
  if (!in || error || std::filesystem::is_directory(path)) throw fail("cannot open file");
  if (file_bytes < 8) throw fail(fmt::format("{} bytes, shorter than the 8-byte header length", file_bytes));
  unsigned char length[8];
  in.read(reinterpret_cast<char*>(length), 8);
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length[i];
  if (!in || header_bytes > kMaxHeaderBytes || header_bytes > file_bytes - 8) {
    throw fail(fmt::format("header length {} exceeds the file ({} bytes) or 100 MiB: not a safetensors file",
                           header_bytes, file_bytes));
  }
  f.data_start_ = 8 + header_bytes;
  const std::uint64_t data_bytes = file_bytes - f.data_start_;
  std::string header_text(header_bytes, '\0');
  if (!in.read(header_text.data(), long(header_bytes))) throw fail("cannot read the header");
  // Through the guarded parser: nesting is bounded and a key given twice refused (the
  // format disallows duplicate keys).
  Json header;
  try {
    header = parse_json_text(header_text, "header");
  } catch (const Error& error) {
    throw fail(fmt::format("{} (not a safetensors file?)", error.what()));
  }
  if (!header.is_object()) throw fail("the header is not a JSON object");
  for (const auto& item : header.items()) {
    // Named, not a structured binding: the lambda below captures it (clang 14 builds the
    // fuzz target, and captures no structured binding).
    const std::string& name = item.key();
    const Json& entry = item.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) throw fail("__metadata__: must map strings to strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) throw fail(fmt::format("__metadata__.{}: must be a string", key));
        f.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { return fail(fmt::format("tensor {}: {}", name, what)); };
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") ||
        !entry["shape"].is_array() || !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      throw bad("must be {\"dtype\": string, \"shape\": [ints], \"data_offsets\": [begin, end]}");
    }
    Entry e;
    e.dtype = entry["dtype"].get<std::string>();
    const std::size_t bytes_each = dtype_bytes(e.dtype);
    if (bytes_each == 0) throw bad(fmt::format("dtype {} is not a safetensors dtype", e.dtype));
    std::uint64_t elements = 1;
    for (const Json& d : entry["shape"]) {
      // Each factor below 2^40 and the product below 2^56: no overflow anywhere after.
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0 || d.get<std::int64_t>() > (std::int64_t(1) << 40)) {
        throw bad(fmt::format("shape {} must list non-negative integers", shown(entry["shape"])));
      }
      e.shape.push_back(d.get<std::int64_t>());
      elements *= std::uint64_t(e.shape.back());
      if (elements > (std::uint64_t(1) << 56) / 8) throw bad(fmt::format("shape {} is too large", shown(entry["shape"])));
    }
    for (const Json& o : entry["data_offsets"]) {
      if (!o.is_number_unsigned()) throw bad("data_offsets must be non-negative integers");
    }
    e.begin = entry["data_offsets"][0].get<std::uint64_t>();
    e.end = entry["data_offsets"][1].get<std::uint64_t>();
    if (e.begin > e.end || e.end > data_bytes) {
      throw bad(fmt::format("data_offsets [{}, {}] lie outside the {} data bytes (a truncated file?)", e.begin, e.end,
                            data_bytes));
    }
    if (e.end - e.begin != element_count(e.shape) * bytes_each) {
      throw bad(fmt::format("data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {}", e.begin, e.end,
                            e.end - e.begin, shown(entry["shape"]), e.dtype, element_count(e.shape) * bytes_each));
    }
    f.entries_[name] = std::move(e);
  }
  // The ranges in order must tile the data section exactly.
  std::vector<std::pair<std::uint64_t, std::string>> order;
  for (const auto& [name, e] : f.entries_) order.emplace_back(e.begin, name);
  std::sort(order.begin(), order.end());
  std::uint64_t expected = 0;
  for (const auto& [begin, name] : order) {
    const Entry& e = f.entries_.at(name);
    if (e.begin != expected) {
      throw fail(fmt::format("tensor {}: data_offsets start at {}, expected {} (ranges overlap or leave a gap)", name,
                             e.begin, expected));
    }
    expected = e.end;
  }
  if (expected != data_bytes) {
    throw fail(fmt::format("the tensors cover {} of the {} data bytes (trailing bytes, or a corrupt header)", expected,
                           data_bytes));
  }
  return f;
}

std::vector<float> SafetensorsFile::values(const std::string& name) const {
  const Entry& e = entries_.at(name);
  if (e.dtype != "F32" && e.dtype != "BF16") {
    throw Error(fmt::format("internal: safetensors values of dtype {} (tensor {})", e.dtype, name));
  }
  std::string bytes(e.end - e.begin, '\0');
  std::ifstream in(path_, std::ios::binary);
  in.seekg(std::streamoff(data_start_ + e.begin));
  if (!in.read(bytes.data(), std::streamsize(bytes.size()))) {
    throw Error(fmt::format("--init: {}: tensor {}: cannot read its bytes (was the file changed?)", path_, name));
  }
  const std::size_t n = std::size_t(element_count(e.shape));
  std::vector<float> out(n);
  if (e.dtype == "F32") {
    std::memcpy(out.data(), bytes.data(), n * sizeof(float));
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t half;
      std::memcpy(&half, bytes.data() + 2 * i, sizeof half);
      out[i] = kernels::numeric::from_bf16(half);
    }
  }
  // A NaN or Inf weight makes every loss NaN from the first step; say where it is.
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) {
      throw Error(fmt::format("--init: {}: tensor {}: element {} is {}; weights must be finite numbers", path_, name, i,
                              std::isnan(out[i]) ? "NaN" : "infinite"));
    }
  }
  return out;
}

}  // namespace tessel::executor
