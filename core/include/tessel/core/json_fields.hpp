// Reads one JSON object field by field, so that every error names its full path
// ("plan.parallel.tp: ...") and what is allowed, and so that unknown fields (usually
// typos) are refused instead of silently ignored. Every spec parser uses it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tessel/core/input_limits.hpp"

namespace tessel {

using Json = nlohmann::json;

class JsonFields {
 public:
  // Throws tessel::Error when `object` is not a JSON object.
  JsonFields(const Json& object, std::string path);

  const std::string& path() const { return path_; }
  std::string field_path(std::string_view key) const;
  bool has(std::string_view key) const;
  // The raw value of a present field (marks it as read), or nullptr.
  const Json* get(std::string_view key);

  // A positive integer up to `max` (the error names the bound): the default keeps it in an int.
  std::int64_t positive_int(std::string_view key, std::int64_t max = limits::kMaxInt);
  std::int64_t positive_int_or(std::string_view key, std::int64_t fallback, std::int64_t max = limits::kMaxInt);
  std::int64_t int_in_range(std::string_view key, std::int64_t lo, std::int64_t hi,
                            std::int64_t fallback);
  double positive_number(std::string_view key);
  double positive_number_or(std::string_view key, double fallback);
  // A finite number in [lo, hi]; `fallback` when absent.
  double number_in_range(std::string_view key, double lo, double hi);
  double number_in_range_or(std::string_view key, double lo, double hi, double fallback);
  double fraction_or(std::string_view key, double fallback);  // in (0, 1]
  bool boolean_or(std::string_view key, bool fallback);
  std::string string(std::string_view key);
  std::string string_or(std::string_view key, std::string fallback);
  // A string that must be one of `allowed`.
  std::string choice(std::string_view key, std::initializer_list<std::string_view> allowed);
  std::string choice_or(std::string_view key, std::initializer_list<std::string_view> allowed,
                        std::string fallback);

  // Refuses any field that was not read; call after reading all known ones.
  void finish() const;

  [[noreturn]] void fail(std::string_view key, const std::string& message) const;

 private:
  const Json& required(std::string_view key);
  const Json& object_;
  std::string path_;
  std::set<std::string, std::less<>> read_;
};

// Joins allowed values for messages: "gelu|swiglu".
std::string join_choices(std::initializer_list<std::string_view> allowed);

// Parses JSON text; `origin` (a file name) prefixes the error on malformed input. A key
// given twice in one object and nesting deeper than limits::kMaxJsonDepth are refused.
Json parse_json_text(const std::string& text, const std::string& origin);
// Reads and parses a JSON file with a clear error when it is missing, not a regular
// file, too large (read_input_file) or malformed.
Json read_json_file(const std::string& file_path);
// Writes via a temporary file and rename, so a failure leaves nothing half-written.
void write_text_file_atomically(const std::string& file_path, const std::string& text);

}  // namespace tessel
