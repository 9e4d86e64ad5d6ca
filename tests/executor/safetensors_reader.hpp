// The safetensors reader the export tests check files with, written from the format's
// description alone (8-byte little-endian header length, JSON header, byte buffer) rather
// than with the code under test, and asserting the format's rules as it parses: every
// entry's byte range matches its dtype and shape, and the ranges tile the data section.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tessel/core/json_fields.hpp"

namespace tessel_safetensors_test {
using tessel::Json;

struct ParsedTensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;
};
struct Parsed {
  std::map<std::string, ParsedTensor> tensors;
  Json metadata;
  std::string data;  // the byte buffer after the header
  std::uint64_t header_bytes = 0;
};

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Parses `bytes` and asserts the format's rules: the data ranges tile the buffer.
inline Parsed parse(const std::string& bytes) {
  Parsed p;
  EXPECT_GE(bytes.size(), 8u);
  for (int i = 0; i < 8; ++i) p.header_bytes |= std::uint64_t(std::uint8_t(bytes[std::size_t(i)])) << (8 * i);
  EXPECT_LE(8 + p.header_bytes, bytes.size());
  const std::string header = bytes.substr(8, p.header_bytes);
  EXPECT_EQ(header.front(), '{');
  const Json json = Json::parse(header);
  p.data = bytes.substr(8 + p.header_bytes);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, entry] : json.items()) {
    if (name == "__metadata__") {
      p.metadata = entry;
      continue;
    }
    ParsedTensor t;
    t.dtype = entry.at("dtype").get<std::string>();
    t.shape = entry.at("shape").get<std::vector<std::int64_t>>();
    t.begin = entry.at("data_offsets").at(0).get<std::uint64_t>();
    t.end = entry.at("data_offsets").at(1).get<std::uint64_t>();
    std::uint64_t elements = 1;
    for (std::int64_t d : t.shape) elements *= std::uint64_t(d);
    const std::uint64_t element_bytes = t.dtype == "F32" ? 4 : t.dtype == "BF16" ? 2 : 0;
    EXPECT_NE(element_bytes, 0u) << name << " has dtype " << t.dtype;
    EXPECT_EQ(t.end - t.begin, elements * element_bytes) << name;
    ranges.emplace_back(t.begin, t.end);
    p.tensors[name] = t;
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t at = 0;
  for (const auto& [begin, end] : ranges) {
    EXPECT_EQ(begin, at) << "a gap or an overlap at byte " << at;
    at = end;
  }
  EXPECT_EQ(at, p.data.size()) << "the ranges do not cover the data section";
  return p;
}

// Element [r][c] of stored tensor `name` (F32, 2-D).
inline float stored_at(const Parsed& p, const std::string& name, std::int64_t r, std::int64_t c) {
  const ParsedTensor& t = p.tensors.at(name);
  float value = 0;
  std::memcpy(&value, p.data.data() + t.begin + std::uint64_t(r * t.shape.at(1) + c) * 4, 4);
  return value;
}

}  // namespace tessel_safetensors_test
