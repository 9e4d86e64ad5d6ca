// What every libFuzzer target of tests/fuzz shares: the fuzzer's bytes as the text of a
// file tessel reads from outside, handed to one reader. A reader may refuse any input,
// but only with tessel::Error (one line for the user); anything else that escapes (an
// nlohmann type_error, std::bad_alloc, a crash, undefined behaviour caught by the
// sanitizers) is a finding, and libFuzzer stops on it with the input that caused it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessel/core/error.hpp"
#include "tessel/core/json_fields.hpp"

namespace tessel_fuzz {

// Inputs beyond this are not more interesting, only slower; the bound on input files
// itself is the readers' business (docs/RELIABILITY.md, bounded inputs).
inline constexpr std::size_t kMaxInputBytes = 1 << 16;

template <typename Reader>
int read_as_json(const std::uint8_t* data, std::size_t size, const char* origin, Reader&& reader) {
  if (size > kMaxInputBytes) return -1;  // not added to the corpus
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    reader(tessel::parse_json_text(text, origin));
  } catch (const tessel::Error&) {
    // A refusal with one line is the right answer to bad input.
  }
  return 0;
}

}  // namespace tessel_fuzz
