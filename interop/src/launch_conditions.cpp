// See launch_conditions.hpp. Conditions are read as a sequence of bracket tests joined
// left to right by || and && (bash gives the two the same precedence).
#include "launch_conditions.hpp"

#include "engines.hpp"

#include <fmt/format.h>

namespace tessel::interop::detail {

namespace {

// One test's words, e.g. {"!", "-f", "x"} or {"a", "==", "b"} (an empty expansion is gone).
bool test(std::vector<std::string> w, const ShellConditionals::Fail& fail, std::vector<std::string>& notes,
          int line_number) {
  bool negate = false;
  while (!w.empty() && w.front() == "!") negate = !negate, w.erase(w.begin());
  auto is_binary = [](const std::string& op) {
    for (const char* known : {"==", "=", "!=", "-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
      if (op == known) return true;
    return false;
  };
  bool result = false;
  if (!w.empty() && (w[0] == "-z" || w[0] == "-n")) {
    const bool empty = w.size() < 2 || w[1].empty();
    result = w[0] == "-z" ? empty : !empty;
  } else if (!w.empty() && (w[0] == "-f" || w[0] == "-d" || w[0] == "-e" || w[0] == "-x" || w[0] == "-s")) {
    notes.push_back(fmt::format("line {}: the file test {} {} is taken as true (files assumed present)", line_number,
                                w[0], w.size() > 1 ? w[1] : ""));
    result = true;
  } else {
    // An operand that expanded to nothing leaves two words.
    if (w.size() == 2 && is_binary(w[0])) w.insert(w.begin(), "");
    if (w.size() == 2 && is_binary(w[1])) w.push_back("");
    if (w.size() != 3 || !is_binary(w[1])) fail("the condition is not evaluated (its branch may depend on the machine)");
    const std::string& op = w[1];
    if (op == "==" || op == "=") {
      result = w[0] == w[2];
    } else if (op == "!=") {
      result = w[0] != w[2];
    } else {
      long long left = 0, right = 0;
      try {
        left = std::stoll(w[0]);
        right = std::stoll(w[2]);
      } catch (const std::exception&) {
        fail(fmt::format("'{}' {} '{}': not integers", w[0], op, w[2]));
      }
      result = op == "-eq" ? left == right : op == "-ne" ? left != right : op == "-lt" ? left < right
             : op == "-le" ? left <= right : op == "-gt" ? left > right : left >= right;
    }
  }
  return negate ? !result : result;
}

}  // namespace

bool ShellConditionals::evaluate(const std::string& condition, const Expand& words, const Fail& fail,
                                 std::vector<std::string>& notes, int line_number) const {
  bool value = true;
  std::string join = "&&";
  std::size_t at = 0;
  while (true) {
    while (at < condition.size() && condition[at] == ' ') ++at;
    const bool doubled = condition.compare(at, 2, "[[") == 0;
    if (!doubled && condition.compare(at, 1, "[") != 0) fail("expected a [ or [[ test in the condition");
    const std::string close = doubled ? " ]]" : " ]";
    const std::size_t open_end = at + (doubled ? 2 : 1);
    const std::size_t end = condition.find(close, open_end);
    if (end == std::string::npos) fail("a [ test is not closed");
    const bool result = test(words(condition.substr(open_end, end - open_end)), fail, notes, line_number);
    value = join == "&&" ? value && result : value || result;
    at = end + close.size();
    while (at < condition.size() && condition[at] == ' ') ++at;
    if (at >= condition.size()) return value;
    join = condition.substr(at, 2);
    if (join != "&&" && join != "||") fail("expected || or && between tests");
    at += 2;
  }
}

bool ShellConditionals::handle(const std::string& line, const Expand& words, const Fail& fail,
                               std::vector<std::string>& notes, int line_number, bool enclosing_active) {
  const std::string text = trim(line);
  auto condition_of = [&](std::size_t keyword_size) {
    std::string rest = trim(text.substr(keyword_size));
    if (rest.size() < 4 || rest.compare(rest.size() - 4, 4, "then") != 0) fail("write '; then' on the if line");
    rest = trim(rest.substr(0, rest.size() - 4));
    if (rest.empty() || rest.back() != ';') fail("write '; then' on the if line");
    return trim(rest.substr(0, rest.size() - 1));
  };
  if (text.starts_with("if ")) {
    Frame frame;
    frame.outer_active = active() && enclosing_active;
    const std::string condition = condition_of(3);
    frame.active = frame.outer_active && evaluate(condition, words, fail, notes, line_number);
    frame.taken = frame.active;
    frames_.push_back(frame);
    return true;
  }
  if (text.starts_with("elif ")) {
    if (frames_.empty()) fail("elif without if");
    Frame& frame = frames_.back();
    const std::string condition = condition_of(5);
    frame.active = !frame.taken && frame.outer_active && evaluate(condition, words, fail, notes, line_number);
    frame.taken = frame.taken || frame.active;
    return true;
  }
  if (text == "else") {
    if (frames_.empty()) fail("else without if");
    Frame& frame = frames_.back();
    frame.active = frame.outer_active && !frame.taken;
    frame.taken = true;
    return true;
  }
  if (text == "fi") {
    if (frames_.empty()) fail("fi without if");
    frames_.pop_back();
    return true;
  }
  return false;
}

}  // namespace tessel::interop::detail
