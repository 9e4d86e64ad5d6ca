// libFuzzer target, built once per token format (TESSEL_FUZZ_TOKENS: llmc, nanogpt or
// megatron): `tessel run --data FILE` opened as that format, checked as a run checks it
// (one global batch, every id inside a vocabulary) and every token read, as the data
// loader would. A Megatron dataset is two files: the input's first two bytes give the
// index's length, the index follows, the data file is the rest.
#include <string_view>

#include "fuzz_files.hpp"
#include "fuzz_reader.hpp"
#include "tessel/executor/token_source.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > tessel_fuzz::kMaxInputBytes) return -1;
  using tessel::executor::TokenFormat;
  const std::string_view format = TESSEL_FUZZ_TOKENS;
  std::string path;
  if (format == "megatron") {
    if (size < 2) return -1;
    const std::size_t index_bytes = std::min<std::size_t>(size - 2, std::size_t(data[0]) | (std::size_t(data[1]) << 8));
    tessel_fuzz::scratch().write("data.idx", data + 2, index_bytes);
    tessel_fuzz::scratch().write("data.bin", data + 2 + index_bytes, size - 2 - index_bytes);
    path = (tessel_fuzz::scratch().path() / "data").string();
  } else {
    path = tessel_fuzz::scratch().write("tokens.bin", data, size);
  }
  try {
    const TokenFormat asked = format == "llmc"      ? TokenFormat::llmc
                              : format == "nanogpt" ? TokenFormat::nanogpt
                                                    : TokenFormat::megatron;
    const tessel::executor::TokenSource tokens = tessel::executor::open_token_source(path, asked);
    std::int64_t sum = 0;
    for (std::uint64_t i = 0; i < tokens.count(); ++i) sum += tokens[i];
    (void)sum;
    tessel::executor::check_token_data(tokens, 50257, 2, 4);
    // Looked at by detection as `auto` would: never a crash, whichever way it decides.
    (void)tessel::executor::open_token_source(path, TokenFormat::automatic);
  } catch (const tessel::Error&) {
    // A refusal with one line is the right answer to bad input.
  }
  return 0;
}
