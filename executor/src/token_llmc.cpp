// llm.c's token shards, as karpathy/llm.c's dev/data/data_common.py writes them and
// train_gpt2.c reads them: 256 little-endian int32 of header (magic, version, token count, zeros),
// then the ids: magic 20240520 version 1 with uint16 ids (GPT-2), 20240801 version 7 with uint32
// (Llama 3). The header's count must match the bytes after it, so a short shard is caught.
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "token_readers.hpp"

namespace tessel::executor {

namespace {
constexpr std::uint64_t kHeaderInts = 256;
constexpr std::uint64_t kHeaderBytes = kHeaderInts * sizeof(std::int32_t);
constexpr std::int32_t kGpt2Magic = 20240520, kGpt2Version = 1;
constexpr std::int32_t kLlama3Magic = 20240801, kLlama3Version = 7;

std::int32_t header_int(const MappedFile& file, int index) {
  std::int32_t value;
  std::memcpy(&value, file.data() + index * sizeof(std::int32_t), sizeof(value));
  return value;
}
}  // namespace

bool starts_with_llmc_magic(const MappedFile& file) {
  if (file.size_bytes() < sizeof(std::int32_t)) return false;
  const std::int32_t magic = header_int(file, 0);
  return magic == kGpt2Magic || magic == kLlama3Magic;
}

void refuse_almost_llmc(const MappedFile& file) {
  if (file.size_bytes() < kHeaderBytes || starts_with_llmc_magic(file)) return;
  const std::int32_t magic = header_int(file, 0);
  bool zeros_after_count = true;
  for (int i = 3; i < int(kHeaderInts) && zeros_after_count; ++i) zeros_after_count = header_int(file, i) == 0;
  // llm.c's magics are dates; one a few days off is a typo or a newer writer.
  const bool near_magic = std::abs(std::int64_t(magic) - kGpt2Magic) <= 10000 ||
                          std::abs(std::int64_t(magic) - kLlama3Magic) <= 10000;
  if (!zeros_after_count && !near_magic) return;
  throw Error(fmt::format("--data: {}: almost an llm.c shard (magic {}, version {}, {}) but llm.c writes magic {} or {}; "
                          "if it holds headerless tokens, give --data-format nanogpt",
                          file.path(), magic, header_int(file, 1),
                          zeros_after_count ? "a 1024-byte header of zeros after the count" : "a 1024-byte header",
                          kGpt2Magic, kLlama3Magic));
}

TokenSource read_llmc(std::shared_ptr<const MappedFile> file) {
  const std::string& path = file->path();
  if (file->size_bytes() == 0) throw Error(fmt::format("--data: {}: empty file", path));
  if (file->size_bytes() < kHeaderBytes) {
    throw Error(fmt::format("--data: {}: {} bytes, shorter than llm.c's {}-byte header", path, file->size_bytes(),
                            kHeaderBytes));
  }
  const std::int32_t magic = header_int(*file, 0), version = header_int(*file, 1), count = header_int(*file, 2);
  TokenDType dtype;
  if (magic == kGpt2Magic && version == kGpt2Version) dtype = TokenDType::u16;
  else if (magic == kLlama3Magic && version == kLlama3Version) dtype = TokenDType::u32;
  else if (magic != kGpt2Magic && magic != kLlama3Magic) {
    throw Error(fmt::format("--data: {}: bad llm.c magic {} (llm.c writes {} or {})", path, magic, kGpt2Magic,
                            kLlama3Magic));
  } else {
    throw Error(fmt::format("--data: {}: llm.c version {} with magic {} (llm.c writes version {} with it)", path,
                            version, magic, magic == kGpt2Magic ? kGpt2Version : kLlama3Version));
  }
  const std::uint64_t item = token_bytes(dtype), body_bytes = file->size_bytes() - kHeaderBytes;
  if (count <= 0) throw Error(fmt::format("--data: {}: llm.c header holds {} tokens (empty shard)", path, count));
  if (std::uint64_t(count) * item != body_bytes) {
    throw Error(fmt::format("--data: {}: llm.c header says {} tokens, the file holds {} bytes of {} tokens after it "
                            "(truncated or mismatched)",
                            path, count, body_bytes, to_string(dtype)));
  }
  const std::byte* first = file->data() + kHeaderBytes;
  return TokenSource(std::move(file), first, std::uint64_t(count), dtype, path, TokenFormat::llmc);
}

}  // namespace tessel::executor
