// Which reader --data goes to. An explicit --data-format is obeyed; `auto` looks at the
// path and the file's first bytes, in the order that cannot mistake one format for
// another: a Megatron pair is recognised by its .idx, an llm.c shard by its magic, a
// headerless .bin is nanoGPT's, and everything else stays byte-level text as tessel has
// always read it.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "token_readers.hpp"

namespace tessel::executor {

namespace {
bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// PREFIX of PREFIX, PREFIX.bin or PREFIX.idx.
std::string megatron_prefix(const std::string& path) {
  if (ends_with(path, ".bin") || ends_with(path, ".idx")) return path.substr(0, path.size() - 4);
  return path;
}

bool is_file(const std::string& path) {
  std::error_code ignored;
  return std::filesystem::is_regular_file(path, ignored);
}

TokenSource read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in || !is_file(path)) throw Error(fmt::format("--data: {}: cannot open file", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return TokenSource::from_text(buffer.str(), path);
}

TokenFormat detect(const std::string& path) {
  const std::string prefix = megatron_prefix(path);
  const bool named_as_pair = prefix != path;
  if (is_file(prefix + ".idx") && is_file(prefix + ".bin") && (named_as_pair || !is_file(path))) {
    return TokenFormat::megatron;
  }
  if (ends_with(path, ".idx")) {
    throw Error(fmt::format("--data: {}: a Megatron index needs its data file {}.bin next to it", path, prefix));
  }
  if (!is_file(path)) throw Error(fmt::format("--data: {}: cannot open file", path));
  const auto mapped = MappedFile::open(path);
  if (starts_with_llmc_magic(*mapped)) return TokenFormat::llmc;
  if (ends_with(path, ".bin")) {
    refuse_almost_llmc(*mapped);
    return TokenFormat::nanogpt;
  }
  return TokenFormat::text;
}
}  // namespace

TokenSource open_token_source(const std::string& path, TokenFormat format, TokenDType flat_dtype) {
  if (format == TokenFormat::automatic) format = detect(path);
  switch (format) {
    case TokenFormat::text: return read_text(path);
    case TokenFormat::megatron: return read_megatron(megatron_prefix(path));
    case TokenFormat::nanogpt: return read_nanogpt(MappedFile::open(path), flat_dtype);
    case TokenFormat::llmc: return read_llmc(MappedFile::open(path));
    case TokenFormat::automatic: break;
  }
  throw Error(fmt::format("--data: {}: no reader for this format", path));
}

TokenSource open_token_source(const std::string& path, const std::string& format, const std::string& flat_dtype) {
  const TokenFormat asked = parse_token_format(format);
  const TokenDType dtype = flat_dtype.empty() ? TokenDType::u16 : parse_token_dtype(flat_dtype);
  // Resolved first, so that a dtype given for the wrong kind of file is the error named.
  const TokenFormat resolved = asked == TokenFormat::automatic ? detect(path) : asked;
  if (!flat_dtype.empty() && resolved != TokenFormat::nanogpt) {
    throw Error(fmt::format("--data-dtype: {} is read as {}, which {}; --data-dtype is for headerless nanogpt files",
                            path, to_string(resolved), resolved == TokenFormat::text ? "is bytes" : "names its own dtype"));
  }
  return open_token_source(path, resolved, dtype);
}

}  // namespace tessel::executor
