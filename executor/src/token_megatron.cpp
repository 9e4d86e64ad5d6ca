// Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py, _IndexWriter and
// _IndexReader): PREFIX.bin holds every sequence's ids back to back, PREFIX.idx ("MMIDIDX\0\0",
// version, dtype code, sequence and document counts, sizes, pointers, document indices) describes
// them. tessel trains on all sequences in order, documents concatenated with whatever EOD the
// tokeniser wrote; the index is checked against a contiguous layout, so .bin is one span.
#include <cstring>

#include <string>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "token_readers.hpp"

namespace tessel::executor {

namespace {
constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::uint64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

template <typename T>
T read_at(const MappedFile& file, std::uint64_t offset) {
  T value;
  std::memcpy(&value, file.data() + offset, sizeof(T));
  return value;
}

TokenDType dtype_of_code(const std::string& idx, int code) {
  switch (code) {
    case 1: return TokenDType::u8;
    case 2: return TokenDType::i8;
    case 3: return TokenDType::i16;
    case 4: return TokenDType::i32;
    case 5: return TokenDType::i64;
    case 8: return TokenDType::u16;
    case 6:
    case 7:
      throw Error(fmt::format("--data: {}: dtype code {} ({}) holds no token ids", idx, code,
                              code == 6 ? "float64" : "float32"));
    default: throw Error(fmt::format("--data: {}: unknown dtype code {} (Megatron writes 1 to 8)", idx, code));
  }
}

struct Index {
  TokenDType dtype;
  std::uint64_t sequences, documents;
};

Index read_header(const MappedFile& idx) {
  const std::string& path = idx.path();
  if (idx.size_bytes() == 0) throw Error(fmt::format("--data: {}: empty file", path));
  if (idx.size_bytes() < kHeaderBytes) {
    throw Error(fmt::format("--data: {}: {} bytes, shorter than the {}-byte index header (truncated?)", path,
                            idx.size_bytes(), kHeaderBytes));
  }
  if (std::memcmp(idx.data(), kMagic, sizeof(kMagic)) != 0) {
    throw Error(fmt::format("--data: {}: bad magic, not a Megatron MMIDIDX index", path));
  }
  const auto version = read_at<std::uint64_t>(idx, 9);
  if (version != 1) throw Error(fmt::format("--data: {}: index version {}, only version 1 is known", path, version));
  Index index{dtype_of_code(path, read_at<std::uint8_t>(idx, 17)), read_at<std::uint64_t>(idx, 18),
              read_at<std::uint64_t>(idx, 26)};
  // 2^40 sequences are far past any corpus and keep the size arithmetic below exact.
  constexpr std::uint64_t kLimit = std::uint64_t(1) << 40;
  const std::uint64_t arrays = kHeaderBytes + 12 * index.sequences + 8 * index.documents;
  if (index.sequences >= kLimit || index.documents >= kLimit ||
      (idx.size_bytes() != arrays && idx.size_bytes() != arrays + index.sequences)) {
    throw Error(fmt::format("--data: {}: {} bytes, but the header's {} sequences and {} documents need {} "
                            "(truncated or corrupt)",
                            path, idx.size_bytes(), index.sequences, index.documents, arrays));
  }
  if (index.sequences == 0) throw Error(fmt::format("--data: {}: the index lists no sequences (empty dataset)", path));
  return index;
}

// The sequences must lie back to back from byte 0 and end where .bin ends.
void check_layout(const MappedFile& idx, const MappedFile& bin, const Index& index) {
  const std::uint64_t item = token_bytes(index.dtype);
  const std::uint64_t sizes_at = kHeaderBytes, pointers_at = sizes_at + 4 * index.sequences;
  std::uint64_t expected_bytes = 0;
  for (std::uint64_t i = 0; i < index.sequences; ++i) {
    const auto size = read_at<std::int32_t>(idx, sizes_at + 4 * i);
    const auto pointer = read_at<std::int64_t>(idx, pointers_at + 8 * i);
    if (size < 0) throw Error(fmt::format("--data: {}: sequence {} has size {}", idx.path(), i, size));
    if (pointer < 0 || std::uint64_t(pointer) + std::uint64_t(size) * item > bin.size_bytes()) {
      // The end, for the message, without overflowing int64 for a pointer near 2^63
      // (found by make fuzz): unsigned there, signed for a negative pointer.
      const std::uint64_t span = std::uint64_t(size) * item;
      const std::string end = pointer >= 0 ? std::to_string(std::uint64_t(pointer) + span)
                                           : std::to_string(pointer + std::int64_t(span));
      throw Error(fmt::format("--data: {}: sequence {} points to bytes {}..{}, outside {} ({} bytes)", idx.path(), i,
                              pointer, end, bin.path(), bin.size_bytes()));
    }
    if (std::uint64_t(pointer) != expected_bytes) {
      throw Error(fmt::format("--data: {}: sequence {} starts at byte {}, but the sizes before it end at {} "
                              "(sizes and pointers disagree)",
                              idx.path(), i, pointer, expected_bytes));
    }
    expected_bytes += std::uint64_t(size) * item;
  }
  if (expected_bytes != bin.size_bytes()) {
    throw Error(fmt::format("--data: {}: the index covers {} bytes, but {} has {} (mismatched pair?)", idx.path(),
                            expected_bytes, bin.path(), bin.size_bytes()));
  }
  const std::uint64_t documents_at = pointers_at + 8 * index.sequences;
  std::int64_t previous = 0;
  for (std::uint64_t d = 0; d < index.documents; ++d) {
    const auto start = read_at<std::int64_t>(idx, documents_at + 8 * d);
    if ((d == 0 && start != 0) || start < previous || std::uint64_t(start) > index.sequences) {
      throw Error(fmt::format("--data: {}: document index {} is {}, not a sequence index in order (0..{})",
                              idx.path(), d, start, index.sequences));
    }
    previous = start;
  }
}
}  // namespace

TokenSource read_megatron(const std::string& prefix) {
  const auto idx = MappedFile::open(prefix + ".idx");
  const Index index = read_header(*idx);
  auto bin = MappedFile::open(prefix + ".bin");
  if (bin->size_bytes() == 0) throw Error(fmt::format("--data: {}: empty file", bin->path()));
  check_layout(*idx, *bin, index);
  const std::byte* first = bin->data();
  const std::uint64_t count = bin->size_bytes() / token_bytes(index.dtype);
  const std::string origin = bin->path();
  return TokenSource(std::move(bin), first, count, index.dtype, origin, TokenFormat::megatron);
}

}  // namespace tessel::executor
