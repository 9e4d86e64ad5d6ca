// TokenSource's typed reads and the checks a run makes of its tokens. Reads go through
// memcpy because the ids of a mapped file need not be aligned (an index's arrays start at
// byte 34); files are little-endian, as every writer of these formats writes them on the
// machines tessel runs on.
#include "tessel/executor/token_source.hpp"

#include <chrono>
#include <cstring>
#include <iostream>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

namespace {
template <typename T>
std::int64_t load_as(const std::byte* first, std::uint64_t i) {
  T value;
  std::memcpy(&value, first + i * sizeof(T), sizeof(T));
  return std::int64_t(value);
}

// The first id of [begin, end) outside 0..vocab-1, or `end`.
template <typename T>
std::uint64_t scan(const std::byte* first, std::uint64_t begin, std::uint64_t end, std::int64_t vocab) {
  for (std::uint64_t i = begin; i < end; ++i) {
    const std::int64_t id = load_as<T>(first, i);
    if (id < 0 || id >= vocab) return i;
  }
  return end;
}

std::uint64_t scan_any(TokenDType dtype, const std::byte* first, std::uint64_t begin, std::uint64_t end,
                       std::int64_t vocab) {
  switch (dtype) {
    case TokenDType::u8: return scan<std::uint8_t>(first, begin, end, vocab);
    case TokenDType::i8: return scan<std::int8_t>(first, begin, end, vocab);
    case TokenDType::i16: return scan<std::int16_t>(first, begin, end, vocab);
    case TokenDType::u16: return scan<std::uint16_t>(first, begin, end, vocab);
    case TokenDType::i32: return scan<std::int32_t>(first, begin, end, vocab);
    case TokenDType::u32: return scan<std::uint32_t>(first, begin, end, vocab);
    case TokenDType::i64: return scan<std::int64_t>(first, begin, end, vocab);
  }
  return end;
}

constexpr std::uint64_t kScanChunkTokens = std::uint64_t(1) << 26;  // progress after each
constexpr double kProgressEvery_s = 5.0;  // a scan shorter than this prints nothing
}  // namespace

std::size_t token_bytes(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::u8:
    case TokenDType::i8: return 1;
    case TokenDType::i16:
    case TokenDType::u16: return 2;
    case TokenDType::i32:
    case TokenDType::u32: return 4;
    case TokenDType::i64: return 8;
  }
  return 1;
}

const char* to_string(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::u8: return "uint8";
    case TokenDType::i8: return "int8";
    case TokenDType::i16: return "int16";
    case TokenDType::u16: return "uint16";
    case TokenDType::i32: return "int32";
    case TokenDType::u32: return "uint32";
    case TokenDType::i64: return "int64";
  }
  return "?";
}

TokenDType parse_token_dtype(const std::string& text) {
  if (text == "uint16") return TokenDType::u16;
  if (text == "uint32") return TokenDType::u32;
  throw Error(fmt::format("--data-dtype: must be uint16 or uint32, got {}", text));
}

const char* to_string(TokenFormat format) {
  switch (format) {
    case TokenFormat::text: return "text";
    case TokenFormat::megatron: return "megatron";
    case TokenFormat::nanogpt: return "nanogpt";
    case TokenFormat::llmc: return "llmc";
    case TokenFormat::automatic: return "auto";
  }
  return "?";
}

TokenFormat parse_token_format(const std::string& text) {
  for (TokenFormat format : {TokenFormat::text, TokenFormat::megatron, TokenFormat::nanogpt, TokenFormat::llmc,
                             TokenFormat::automatic}) {
    if (text == to_string(format)) return format;
  }
  throw Error(fmt::format("--data-format: must be text, megatron, nanogpt, llmc or auto, got {}", text));
}

TokenSource::TokenSource(std::shared_ptr<const void> owner, const std::byte* first, std::uint64_t count,
                         TokenDType dtype, std::string origin, TokenFormat format)
    : owner_(std::move(owner)), first_(first), count_(count), dtype_(dtype), origin_(std::move(origin)),
      format_(format) {}

TokenSource TokenSource::from_text(std::string text, std::string origin) {
  auto owned = std::make_shared<const std::string>(std::move(text));
  const auto* first = reinterpret_cast<const std::byte*>(owned->data());
  const std::uint64_t count = owned->size();
  return TokenSource(std::move(owned), first, count, TokenDType::u8, std::move(origin), TokenFormat::text);
}

std::int64_t TokenSource::operator[](std::uint64_t i) const {
  switch (dtype_) {
    case TokenDType::u8: return load_as<std::uint8_t>(first_, i);
    case TokenDType::i8: return load_as<std::int8_t>(first_, i);
    case TokenDType::i16: return load_as<std::int16_t>(first_, i);
    case TokenDType::u16: return load_as<std::uint16_t>(first_, i);
    case TokenDType::i32: return load_as<std::int32_t>(first_, i);
    case TokenDType::u32: return load_as<std::uint32_t>(first_, i);
    case TokenDType::i64: return load_as<std::int64_t>(first_, i);
  }
  return 0;
}

std::optional<TokenSource::OutOfRange> TokenSource::first_out_of_range(
    std::int64_t vocab, const std::function<void(double)>& progress) const {
  for (std::uint64_t begin = 0; begin < count_; begin += kScanChunkTokens) {
    const std::uint64_t end = std::min(count_, begin + kScanChunkTokens);
    const std::uint64_t found = scan_any(dtype_, first_, begin, end, vocab);
    if (found != end) return OutOfRange{found, (*this)[found]};
    if (progress && end < count_) progress(double(end) / double(count_));
  }
  return std::nullopt;
}

void check_token_data(const TokenSource& tokens, std::int64_t vocab, int global_batch, int seq) {
  // Text needs only the loader's own minimum of one window (it wraps around); a token
  // corpus must hold a whole first global batch so that step 1 repeats no window.
  const bool text = tokens.format() == TokenFormat::text;
  const std::uint64_t needed = (text ? 1 : std::uint64_t(global_batch)) * std::uint64_t(seq) + 1;
  if (tokens.count() < needed) {
    throw Error(fmt::format("--data: {}: {} tokens, fewer than one global batch of {} windows of {} (needs {})",
                            tokens.origin(), tokens.count(), global_batch, seq, needed));
  }
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_line = Clock::now();
  const auto report = [&](double done) {
    if (std::chrono::duration<double>(Clock::now() - last_line).count() < kProgressEvery_s) return;
    last_line = Clock::now();
    std::cerr << fmt::format("tessel: checking token ids of {}: {:.0f}%\n", tokens.origin(), 100.0 * done)
              << std::flush;
  };
  if (const auto bad = tokens.first_out_of_range(vocab, report)) {
    throw Error(fmt::format("--data: {}: token id {} at position {} is outside the model's vocabulary of {}",
                            tokens.origin(), bad->id, bad->position, vocab));
  }
}

}  // namespace tessel::executor
