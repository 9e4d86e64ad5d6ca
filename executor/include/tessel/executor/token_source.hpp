// The tokens a run trains on, whatever file they came from: a read-only span of token ids of one
// integer type. Pre-tokenised corpora (Megatron-LM's indexed dataset, nanoGPT, llm.c shards) are
// memory-mapped, so a corpus larger than memory trains; text keeps its bytes (one token each).
// Typed at run time rather than templated so one DataLoader serves every format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace tessel::executor {

// The integer types token files are written in.
enum class TokenDType { u8, i8, i16, u16, i32, u32, i64 };
std::size_t token_bytes(TokenDType dtype);
const char* to_string(TokenDType dtype);
// "uint16" or "uint32" (the spellings of --data-dtype); throws tessel::Error otherwise.
TokenDType parse_token_dtype(const std::string& text);

// How --data is read. `automatic` looks at the file (open_token_source says how).
enum class TokenFormat { text, megatron, nanogpt, llmc, automatic };
const char* to_string(TokenFormat format);
// text|megatron|nanogpt|llmc|auto; throws tessel::Error otherwise.
TokenFormat parse_token_format(const std::string& text);

class TokenSource {
 public:
  // `first` stays valid while `owner` lives (a mapping or a string).
  TokenSource(std::shared_ptr<const void> owner, const std::byte* first, std::uint64_t count, TokenDType dtype,
              std::string origin, TokenFormat format);
  // Byte-level text: token i is byte i, 0..255.
  static TokenSource from_text(std::string text, std::string origin = "text");

  std::uint64_t count() const { return count_; }
  TokenDType dtype() const { return dtype_; }
  TokenFormat format() const { return format_; }
  // The file the tokens came from, for error lines.
  const std::string& origin() const { return origin_; }
  std::int64_t operator[](std::uint64_t i) const;

  struct OutOfRange {
    std::uint64_t position;
    std::int64_t id;
  };
  // The first id outside 0..vocab-1 in one pass over all tokens; `progress` (when set)
  // is called with the fraction done every 64 Mi tokens.
  std::optional<OutOfRange> first_out_of_range(std::int64_t vocab,
                                               const std::function<void(double)>& progress = {}) const;

 private:
  std::shared_ptr<const void> owner_;
  const std::byte* first_;
  std::uint64_t count_;
  TokenDType dtype_;
  std::string origin_;
  TokenFormat format_;
};

// Opens --data. `path` is a text file, a flat token file, an llm.c shard, or a Megatron
// dataset given as PREFIX, PREFIX.bin or PREFIX.idx. `automatic` picks: a PREFIX.idx
// next to the .bin -> megatron; a .bin starting with an llm.c magic -> llmc; any other
// .bin -> nanogpt in `flat_dtype`; anything else -> text. `flat_dtype` is the type of
// headerless (nanogpt) files only. Throws tessel::Error naming the file and the problem
// (empty, truncated, bad header, index outside the data).
TokenSource open_token_source(const std::string& path, TokenFormat format, TokenDType flat_dtype = TokenDType::u16);

// The same with --data-format and --data-dtype as spelled on the command line (dtype
// empty: uint16). A dtype given for a file that names its own (megatron, llm.c) or for
// text is refused.
TokenSource open_token_source(const std::string& path, const std::string& format, const std::string& flat_dtype);

// The checks a run makes of its data before any rank starts: at least one global batch
// of windows (global_batch * seq + 1 tokens; text keeps its old minimum of one window,
// seq + 1 bytes) and every id below `vocab`. A scan that takes long (a corpus of
// billions of tokens, a cold page cache) prints a progress line on stderr every 5 s.
// Throws tessel::Error naming the file.
void check_token_data(const TokenSource& tokens, std::int64_t vocab, int global_batch, int seq);

}  // namespace tessel::executor
