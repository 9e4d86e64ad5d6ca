// See launch_blocks.hpp. A loop's body is read again by jumping back to its first line;
// a case block takes the first branch whose pattern (alternatives by |, globs * and ?)
// matches its subject, as bash does.
#include "launch_blocks.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace tessel::interop::detail {

namespace {

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

std::string trim(const std::string& text) {
  const std::size_t start = text.find_first_not_of(" \t");
  if (start == std::string::npos) return "";
  return text.substr(start, text.find_last_not_of(" \t") + 1 - start);
}

bool starts_word(const std::string& text, const std::string& keyword) {
  return text == keyword || text.starts_with(keyword + " ") || text.starts_with(keyword + ";");
}

// "COND; do" or "COND" (then `do` on the next line): the condition, and whether `do` was on it.
std::string before_do(const std::string& text, bool& has_do) {
  std::string rest = trim(text);
  has_do = rest.size() >= 2 && rest.compare(rest.size() - 2, 2, "do") == 0 &&
           (rest.size() == 2 || rest[rest.size() - 3] == ';' || rest[rest.size() - 3] == ' ');
  if (has_do) rest = trim(rest.substr(0, rest.size() - 2));
  if (!rest.empty() && rest.back() == ';') rest = trim(rest.substr(0, rest.size() - 1));
  return rest;
}

}  // namespace

std::size_t closing_parenthesis(const std::string& text) {
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (quote != 0) {
      if (text[i] == quote) quote = 0;
    } else if (text[i] == '"' || text[i] == '\'') {
      quote = text[i];
    } else if (text[i] == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(text[i - 1])) != 0)) {
      return std::string::npos;
    } else if (text[i] == ')') {
      return i;
    }
  }
  return std::string::npos;
}

// `a; b` as {"a", "b"} (semicolons outside quotes; `;;` and a lone statement stay whole).
std::vector<std::string> split_statements(const std::string& line) {
  std::vector<std::string> parts;
  std::string part;
  char quote = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || line[i - 1] == ' ')) {
      break;
    } else if (c == ';' && (i + 1 >= line.size() || line[i + 1] != ';') && (i == 0 || line[i - 1] != ';')) {
      parts.push_back(part);
      part.clear();
      continue;
    }
    part += c;
  }
  parts.push_back(part);
  return parts;
}


// `[export|declare [-a]|local|readonly] NAME[+]=value`, by hand: std::regex recurses per
// character and would overflow the stack on a long line.
std::optional<Assignment> parse_assignment(const std::string& line) {
  std::size_t at = 0;
  for (const char* keyword : {"export ", "declare -a ", "declare ", "local ", "readonly "}) {
    if (line.rfind(keyword, 0) == 0) {
      at = std::string(keyword).size();
      while (at < line.size() && line[at] == ' ') ++at;
      break;
    }
  }
  const std::size_t name_start = at;
  if (at >= line.size() || std::isdigit(static_cast<unsigned char>(line[at])) != 0) return std::nullopt;
  while (at < line.size() && is_name_char(line[at])) ++at;
  if (at == name_start) return std::nullopt;
  Assignment assignment;
  assignment.name = line.substr(name_start, at - name_start);
  if (at < line.size() && line[at] == '+') assignment.append = true, ++at;
  if (at >= line.size() || line[at] != '=') return std::nullopt;
  assignment.value = line.substr(at + 1);
  return assignment;
}

ShellBlocks::Step ShellBlocks::handle(const std::vector<std::string>& lines, std::size_t n, const std::string& raw,
                                      bool enclosing_active, const Expand& words, const Test& test,
                                      const Assign& assign, const Fail& fail) {
  const std::string text = trim(raw);
  const bool running = enclosing_active && active();
  Step step;
  // Inside a case block between branches: a pattern line, or esac.
  if (!frames_.empty() && frames_.back().kind == Kind::case_block && !frames_.back().in_branch && text != "esac") {
    Frame& frame = frames_.back();
    const std::size_t close = closing_parenthesis(text);
    if (close == std::string::npos) fail("expected a case pattern `word)` or esac");
    bool matches = false;
    if (frame.outer_active && !frame.taken) {
      std::string alternatives = text.substr(text[0] == '(' ? 1 : 0, close - (text[0] == '(' ? 1 : 0));
      for (std::size_t start = 0; start <= alternatives.size();) {
        const std::size_t bar = std::min(alternatives.find('|', start), alternatives.size());
        const std::vector<std::string> pattern = words(trim(alternatives.substr(start, bar - start)));
        const std::string glob = pattern.empty() ? "" : pattern.front();
        // fnmatch backtracks: a pattern of many stars on a long word could take long.
        if (std::count(glob.begin(), glob.end(), '*') > kMaxStars)
          fail(fmt::format("a case pattern with more than {} '*' is not evaluated", kMaxStars));
        if (::fnmatch(glob.c_str(), frame.subject.c_str(), 0) == 0) matches = true;
        start = bar + 1;
      }
    }
    frame.active = matches;
    frame.taken = frame.taken || matches;
    frame.in_branch = true;
    step.consumed = true;
    if (const std::string after = trim(text.substr(close + 1)); !after.empty()) step.rest = {after};
    return step;
  }
  if (!frames_.empty() && frames_.back().kind == Kind::case_block && frames_.back().in_branch) {
    if (text == ";;") {
      frames_.back().in_branch = false;
      step.consumed = true;
      return step;
    }
    if (text.size() > 2 && text.compare(text.size() - 2, 2, ";;") == 0) {
      step.consumed = true;
      step.rest = {trim(text.substr(0, text.size() - 2)), ";;"};
      return step;
    }
  }
  if (text == "esac") {
    if (frames_.empty() || frames_.back().kind != Kind::case_block) fail("esac without case");
    frames_.pop_back();
    step.consumed = true;
    return step;
  }
  if (starts_word(text, "case")) {
    const std::size_t in_at = text.rfind(" in");
    if (in_at == std::string::npos || trim(text.substr(in_at + 3)) != "") fail("write `case WORD in` on one line");
    Frame frame;
    frame.kind = Kind::case_block;
    frame.outer_active = running;
    if (running) {
      std::string subject;
      for (const auto& word : words(text.substr(4, in_at - 4))) subject += (subject.empty() ? "" : " ") + word;
      frame.subject = subject;
    }
    frames_.push_back(frame);
    step.consumed = true;
    return step;
  }
  const bool is_while = starts_word(text, "while"), is_until = starts_word(text, "until");
  if (is_while || is_until || starts_word(text, "for")) {
    bool has_do = false;
    const std::string head = before_do(text.substr(is_until ? 5 : is_while ? 5 : 3), has_do);
    std::size_t body = n + 1;
    if (!has_do) {
      if (body >= lines.size() || trim(lines[body]) != "do") fail("write `do` after the loop's condition");
      ++body;
    }
    Frame frame;
    frame.outer_active = running;
    frame.body = body;
    if (is_while || is_until) {
      frame.condition = (is_until ? "! " : "") + head;
      frame.active = running && (is_until ? !test(head) : test(head));
    } else {
      const std::size_t in_at = head.find(" in ");
      if (in_at == std::string::npos) fail("write `for NAME in WORDS; do`");
      frame.condition = trim(head.substr(0, in_at));
      if (running) frame.values = words(head.substr(in_at + 4));
      frame.active = running && !frame.values.empty();
      if (frame.active) assign(frame.condition, frame.values.front()), frame.values.erase(frame.values.begin());
    }
    frames_.push_back(frame);
    step.consumed = true;
    return step;
  }
  if (text == "done" || text.starts_with("done ") || text.starts_with("done;")) {
    if (frames_.empty() || frames_.back().kind != Kind::loop) fail("done without a loop");
    Frame& frame = frames_.back();
    step.consumed = true;
    bool again = false;
    if (frame.active) {
      if (++turns_ >= kMaxIterations) fail(fmt::format("the loops ran {} times in all; tessel stops there", kMaxIterations));
      if (!frame.values.empty()) {
        assign(frame.condition, frame.values.front());
        frame.values.erase(frame.values.begin());
        again = true;
      } else if (frame.condition.starts_with("[") || frame.condition.starts_with("! [")) {
        const bool negated = frame.condition.starts_with("! ");
        const bool value = test(negated ? frame.condition.substr(2) : frame.condition);
        again = negated ? !value : value;
      }
    }
    if (again) {
      step.jump = frame.body;
    } else {
      frames_.pop_back();
    }
    return step;
  }
  return step;
}

}  // namespace tessel::interop::detail
