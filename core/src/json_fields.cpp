#include "tessel/core/json_fields.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/input_file.hpp"

namespace tessel {

void assertion_failed(const char* condition, const char* file, int line,
                      const std::string& message) {
  std::fprintf(stderr, "tessel: internal error at %s:%d: %s (%s)\n", file, line,
               message.c_str(), condition);
  std::abort();
}

namespace {
std::string describe(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}
}  // namespace

std::string join_choices(std::initializer_list<std::string_view> allowed) {
  std::string out;
  for (auto choice : allowed) {
    if (!out.empty()) out += '|';
    out += choice;
  }
  return out;
}

JsonFields::JsonFields(const Json& object, std::string path)
    : object_(object), path_(std::move(path)) {
  if (!object_.is_object()) {
    throw Error(fmt::format("{}: must be a JSON object, got {}", path_.empty() ? "plan" : path_, describe(object_)));
  }
}

std::string JsonFields::field_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

bool JsonFields::has(std::string_view key) const {
  return object_.contains(std::string(key));
}

void JsonFields::fail(std::string_view key, const std::string& message) const {
  throw Error(fmt::format("{}: {}", field_path(key), message));
}

const Json* JsonFields::get(std::string_view key) {
  auto it = object_.find(std::string(key));
  if (it == object_.end()) return nullptr;
  read_.emplace(key);
  return &*it;
}

const Json& JsonFields::required(std::string_view key) {
  const Json* value = get(key);
  if (value == nullptr) fail(key, "missing (required)");
  return *value;
}

std::int64_t JsonFields::positive_int(std::string_view key, std::int64_t max) {
  const Json& value = required(key);
  // Integers beyond int64 parse as unsigned: they are too large, not negative.
  if (value.is_number_unsigned() && value.get<std::uint64_t>() > std::uint64_t(max)) {
    fail(key, fmt::format("must be a positive integer up to {}, got {}", max, describe(value)));
  }
  if (!value.is_number_integer() || value.get<std::int64_t>() <= 0) {
    fail(key, fmt::format("must be a positive integer, got {}", describe(value)));
  }
  if (value.get<std::int64_t>() > max) {
    fail(key, fmt::format("must be a positive integer up to {}, got {}", max, describe(value)));
  }
  return value.get<std::int64_t>();
}

std::int64_t JsonFields::positive_int_or(std::string_view key, std::int64_t fallback, std::int64_t max) {
  return has(key) ? positive_int(key, max) : fallback;
}

std::int64_t JsonFields::int_in_range(std::string_view key, std::int64_t lo, std::int64_t hi,
                                      std::int64_t fallback) {
  const Json* value = get(key);
  if (value == nullptr) return fallback;
  if (!value->is_number_integer() || value->get<std::int64_t>() < lo ||
      value->get<std::int64_t>() > hi) {
    fail(key, fmt::format("must be an integer in {}..{}, got {}", lo, hi, describe(*value)));
  }
  return value->get<std::int64_t>();
}

double JsonFields::positive_number(std::string_view key) {
  const Json& value = required(key);
  if (!value.is_number() || !(value.get<double>() > 0) || !std::isfinite(value.get<double>())) {
    fail(key, fmt::format("must be a positive number, got {}", describe(value)));
  }
  return value.get<double>();
}

double JsonFields::positive_number_or(std::string_view key, double fallback) {
  return has(key) ? positive_number(key) : fallback;
}

double JsonFields::number_in_range(std::string_view key, double lo, double hi) {
  const Json& value = required(key);
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < lo ||
      value.get<double>() > hi) {
    fail(key, fmt::format("must be a number in [{:g}, {:g}], got {}", lo, hi, describe(value)));
  }
  return value.get<double>();
}

double JsonFields::number_in_range_or(std::string_view key, double lo, double hi, double fallback) {
  return has(key) ? number_in_range(key, lo, hi) : fallback;
}

double JsonFields::fraction_or(std::string_view key, double fallback) {
  const Json* value = get(key);
  if (value == nullptr) return fallback;
  if (!value->is_number() || !(value->get<double>() > 0) || value->get<double>() > 1) {
    fail(key, fmt::format("must be a number in (0, 1], got {}", describe(*value)));
  }
  return value->get<double>();
}

bool JsonFields::boolean_or(std::string_view key, bool fallback) {
  const Json* value = get(key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) fail(key, fmt::format("must be true or false, got {}", describe(*value)));
  return value->get<bool>();
}

std::string JsonFields::string(std::string_view key) {
  const Json& value = required(key);
  if (!value.is_string() || value.get<std::string>().empty()) {
    fail(key, fmt::format("must be a non-empty string, got {}", describe(value)));
  }
  return value.get<std::string>();
}

std::string JsonFields::string_or(std::string_view key, std::string fallback) {
  return has(key) ? string(key) : fallback;
}

std::string JsonFields::choice(std::string_view key,
                               std::initializer_list<std::string_view> allowed) {
  const Json& value = required(key);
  if (value.is_string()) {
    for (auto option : allowed) {
      if (value.get<std::string>() == option) return std::string(option);
    }
  }
  fail(key, fmt::format("must be one of {}, got {}", join_choices(allowed), describe(value)));
}

std::string JsonFields::choice_or(std::string_view key,
                                  std::initializer_list<std::string_view> allowed,
                                  std::string fallback) {
  return has(key) ? choice(key, allowed) : fallback;
}

void JsonFields::finish() const {
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (read_.count(it.key()) == 0) {
      std::string known;
      for (const auto& name : read_) known += (known.empty() ? "" : ", ") + name;
      throw Error(fmt::format("{}: unknown field (this object reads: {})", field_path(it.key()),
                              known.empty() ? "nothing" : known));
    }
  }
}

namespace {
// Watches the parser's events: one frame per open array or object (the keys seen so
// far, for objects), so that a repeated key and too deep nesting stop the parse at once
// instead of silently keeping the last value or recursing without bound later.
class JsonGuard {
 public:
  explicit JsonGuard(const std::string& origin) : origin_(origin) {}
  bool operator()(int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (int(frames_.size()) >= limits::kMaxJsonDepth) {
          throw Error(fmt::format("{}: JSON nested deeper than {} levels", origin_, limits::kMaxJsonDepth));
        }
        frames_.push_back({event == Json::parse_event_t::object_start, {}});
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!frames_.empty()) frames_.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!frames_.empty() && frames_.back().is_object &&
            !frames_.back().keys.insert(parsed.get<std::string>()).second) {
          throw Error(fmt::format("{}: key \"{}\" appears twice in one object (each key may be given once)",
                                  origin_, parsed.get<std::string>()));
        }
        break;
      case Json::parse_event_t::value:
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool is_object;
    std::set<std::string> keys;
  };
  const std::string& origin_;
  std::vector<Frame> frames_;
};
}  // namespace

Json parse_json_text(const std::string& text, const std::string& origin) {
  try {
    return Json::parse(text, JsonGuard(origin));
  } catch (const Json::exception& error) {
    // A parse_error, or an out_of_range for a number beyond double's range ("1e400",
    // found by make fuzz). nlohmann's message starts with "[json.exception.parse_error.101] "
    // or "[json.exception.out_of_range.406] "; keep the rest.
    std::string message = error.what();
    if (auto pos = message.find("] "); pos != std::string::npos) message = message.substr(pos + 2);
    // nlohmann quotes the token it stopped at whole: 50,000 digits make no error line.
    constexpr std::size_t kMaxMessage = 120;
    if (message.size() > kMaxMessage) message = message.substr(0, kMaxMessage) + "...";
    throw Error(fmt::format("{}: malformed JSON: {}", origin, message));
  }
}

Json read_json_file(const std::string& file_path) {
  return parse_json_text(read_input_file(file_path), file_path);
}

void write_text_file_atomically(const std::string& file_path, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path target(file_path);
  const fs::path temporary = target.string() + ".tmp-tessel";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(fmt::format("{}: cannot write file", file_path));
    out << text;
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      throw Error(fmt::format("{}: write failed", file_path));
    }
  }
  std::error_code rename_error;
  fs::rename(temporary, target, rename_error);
  if (rename_error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw Error(fmt::format("{}: cannot write file: {}", file_path, rename_error.message()));
  }
}

}  // namespace tessel
