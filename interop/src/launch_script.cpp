// Reads a launch script statement by statement: assignments fill a variable table, if blocks
// choose lines (launch_conditions.hpp), loops are refused, the first command running a Python
// trainer gives the options. Words split close enough to bash for launch scripts; the
// environment is never read (a script reads alike everywhere); arithmetic past 64 bits,
// nesting past kMaxNesting and expansions past kMaxExpandedBytes are refused in one line.
#include "launch_script.hpp"

#include "launch_blocks.hpp"
#include "launch_conditions.hpp"

#include <cctype>
#include <climits>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::interop::detail {

namespace {

constexpr char kSplit = '\x1f';  // where an unquoted expansion may be split into words
// Launch scripts nest a few expansions and parentheses and hold values of a few KiB;
// these bounds are far above that and keep the reader's stack and memory small.
constexpr int kMaxNesting = 100;
constexpr std::size_t kMaxExpandedBytes = std::size_t(1) << 20;

// At most the first 40 characters of `text`, for an error line.
std::string shown(const std::string& text) { return text.size() <= 40 ? text : text.substr(0, 40) + "..."; }

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

class Shell {
 public:
  explicit Shell(std::string source) : source_(std::move(source)) {}

  int line = 0;
  std::vector<std::string> notes;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("{}: line {}: {}", source_, line, what));
  }

  // $1.. $9, $# and $@ from `args`, after `shift`ing `dropped` of them.
  void set_positional(std::vector<std::string> args) {
    positional_ = std::move(args);
    for (int i = 1; i <= 9; ++i) {
      assign(std::to_string(i), {std::size_t(i) <= positional_.size() ? positional_[std::size_t(i - 1)] : ""}, false);
    }
    assign("#", {std::to_string(positional_.size())}, false);
    assign("@", positional_, false);
  }
  void shift(std::size_t count) {
    if (count > positional_.size()) fail(fmt::format("shift {}: only {} argument(s) left", count, positional_.size()));
    set_positional(std::vector<std::string>(positional_.begin() + std::ptrdiff_t(count), positional_.end()));
  }

  void assign(const std::string& name, std::vector<std::string> values, bool append) {
    auto& slot = vars_[name];
    if (!append) slot.clear();
    std::size_t bytes = 0;
    for (const auto& element : slot) bytes += element.size() + 1;
    for (auto& value : values) {
      bytes += value.size() + 1;
      if (bytes > kMaxExpandedBytes) too_large(name);
      slot.push_back(std::move(value));
    }
  }

  // The words of `text`; `split` = false keeps unquoted expansions whole (assignments).
  std::vector<std::string> words(const std::string& text, bool split = true) {
    std::vector<std::string> out;
    std::size_t out_bytes = 0;
    std::string word;
    bool have_word = false;
    auto finish_word = [&] {
      if (!have_word) return;
      std::string piece;
      for (char c : word + kSplit) {
        if (c != kSplit) {
          piece += c;
        } else if (!piece.empty()) {
          out_bytes += piece.size() + 1;
          out.push_back(std::move(piece));
          piece.clear();
        }
      }
      word.clear();
      have_word = false;
    };
    for (std::size_t i = 0; i < text.size();) {
      if (word.size() + out_bytes > kMaxExpandedBytes) too_large("the line");
      const char c = text[i];
      if (std::isspace(static_cast<unsigned char>(c)) != 0) {
        finish_word();
        ++i;
      } else if (c == '#' && !have_word) {
        while (i < text.size() && text[i] != '\n') ++i;
      } else if (c == '|' || c == ';' || c == '&') {
        finish_word();
        break;  // a pipe or the next command: this command's words end here
      } else if (c == '>' || c == '<') {
        if (have_word && word.find_first_not_of("0123456789") == std::string::npos) word.clear(), have_word = false;
        finish_word();
        while (i < text.size() && (text[i] == '>' || text[i] == '<')) ++i;
        if (i < text.size() && text[i] == '&') {
          while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])) == 0) ++i;
        } else {
          while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])) != 0) ++i;
          while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])) == 0) ++i;
        }
      } else if (c == '\'') {
        const std::size_t end = text.find('\'', i + 1);
        if (end == std::string::npos) fail("a single quote is not closed");
        word += text.substr(i + 1, end - i - 1);
        have_word = true;
        i = end + 1;
      } else if (c == '"') {
        have_word = true;
        ++i;
        while (true) {
          if (i >= text.size()) fail("a double quote is not closed");
          if (word.size() + out_bytes > kMaxExpandedBytes) too_large("the line");
          if (text[i] == '"') break;
          if (text[i] == '\\' && i + 1 < text.size() && std::string("\"\\$`").find(text[i + 1]) != std::string::npos) {
            word += text[i + 1];
            i += 2;
          } else if (text[i] == '$') {
            word += expand_dollar(text, i);
          } else {
            word += text[i++];
          }
        }
        ++i;
      } else if (c == '\\') {
        if (i + 1 < text.size()) word += text[i + 1];
        have_word = true;
        i += 2;
      } else if (c == '$') {
        std::string value = expand_dollar(text, i);
        if (split) {
          for (char& v : value)
            if (std::isspace(static_cast<unsigned char>(v)) != 0) v = kSplit;
        }
        word += value;
        have_word = true;
      } else {
        word += c;
        have_word = true;
        ++i;
      }
    }
    finish_word();
    if (out_bytes > kMaxExpandedBytes) too_large("the line");
    return out;
  }

 private:
  [[noreturn]] void too_large(const std::string& what) const {
    fail(fmt::format("{} expands to more than {} MiB (a variable doubling itself?); launch scripts hold far less",
                     what, kMaxExpandedBytes >> 20));
  }

  // One level of nesting (an expansion inside another, a parenthesis, a unary minus)
  // for as long as it lives.
  class Nested {
   public:
    explicit Nested(Shell& shell) : shell_(shell) {
      if (++shell_.depth_ > kMaxNesting) {
        shell_.fail(fmt::format("expansions or parentheses nest deeper than {} levels", kMaxNesting));
      }
    }
    ~Nested() { --shell_.depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Shell& shell_;
  };

  std::string value_of(const std::string& name) const {
    const auto found = vars_.find(name);
    if (found == vars_.end()) return "";
    std::string joined;
    for (const auto& element : found->second) joined += (joined.empty() ? "" : " ") + element;
    return joined;
  }

  bool is_set(const std::string& name) const {
    const auto found = vars_.find(name);
    return found != vars_.end() && !found->second.empty() && !(found->second.size() == 1 && found->second[0].empty());
  }

  // The text between text[open] and its matching `close`, nesting counted.
  std::size_t matching(const std::string& text, std::size_t open, char open_char, char close_char) const {
    int depth = 0;
    for (std::size_t i = open; i < text.size(); ++i) {
      if (text[i] == open_char) ++depth;
      if (text[i] == close_char && --depth == 0) return i;
    }
    fail(fmt::format("'{}' is not closed", open_char));
  }

  std::string join_words(const std::string& text) {
    std::string joined;
    for (const auto& w : words(text, false)) joined += (joined.empty() ? "" : " ") + w;
    return joined;
  }

  // Expands the `$` form at text[i] and moves i past it.
  std::string expand_dollar(const std::string& text, std::size_t& i) {
    const Nested nested(*this);
    const std::size_t start = i++;
    if (i >= text.size()) return "$";
    if (text.compare(i, 2, "((") == 0) {
      // The outer parenthesis's match; the inner one closes just before it.
      std::size_t end = i;
      for (int depth = 0; end < text.size(); ++end) {
        if (text[end] == '(') ++depth;
        if (text[end] == ')' && --depth == 0) break;
      }
      if (end >= text.size() || text[end - 1] != ')') fail("$(( is not closed with ))");
      const std::string expression = text.substr(i + 2, end - 1 - (i + 2));
      i = end + 1;
      return std::to_string(arithmetic(expression));
    }
    if (text[i] == '(') {
      const std::size_t end = matching(text, i, '(', ')');
      notes.push_back(fmt::format("line {}: {} is not run; it expanded to nothing", line, shown(text.substr(start, end + 1 - start))));
      i = end + 1;
      return "";
    }
    if (text[i] == '{') {
      const std::size_t end = matching(text, i, '{', '}');
      const std::string inside = text.substr(i + 1, end - i - 1);
      i = end + 1;
      return expand_braced(inside);
    }
    if (std::isdigit(static_cast<unsigned char>(text[i])) != 0 || std::string("@*#").find(text[i]) != std::string::npos) {
      return value_of(std::string(1, text[i++] == '*' ? '@' : text[i - 1]));  // positional parameters
    }
    if (std::string("?$!-").find(text[i]) != std::string::npos) {
      ++i;  // special parameters: unset when the script is read, not run
      return "";
    }
    std::size_t end = i;
    while (end < text.size() && is_name_char(text[end])) ++end;
    if (end == i) return "$";
    const std::string name = text.substr(i, end - i);
    i = end;
    return value_of(name);
  }

  std::string expand_braced(const std::string& inside) {
    if (!inside.empty() && inside[0] == '#') {
      notes.push_back(fmt::format("line {}: ${{{}}} is not evaluated; it expanded to nothing", line, shown(inside)));
      return "";
    }
    std::size_t name_end = 0;
    while (name_end < inside.size() && is_name_char(inside[name_end])) ++name_end;
    const std::string name = inside.substr(0, name_end);
    std::string rest = inside.substr(name_end);
    if (rest.rfind('[', 0) == 0) {
      const std::size_t close = rest.find(']');
      const std::string index = rest.substr(1, close - 1);
      rest = close == std::string::npos ? "" : rest.substr(close + 1);
      if (index != "@" && index != "*") {
        const auto found = vars_.find(name);
        const std::size_t at = std::size_t(std::max<long long>(0, arithmetic(index)));
        return found == vars_.end() || at >= found->second.size() ? "" : found->second[at];
      }
    }
    if (rest.empty()) return value_of(name);
    const bool colon = rest[0] == ':';
    const std::string op = rest.substr(colon ? 1 : 0, 1);
    // `${X:}` has an operator position but no operator: substr must not run past it.
    const std::size_t word_at = colon ? 2 : 1;
    const std::string word = rest.size() > word_at ? rest.substr(word_at) : "";
    const bool set = colon ? is_set(name) : vars_.count(name) > 0;
    if (op == "-") return set ? value_of(name) : join_words(word);
    if (op == "=") {
      if (!set) assign(name, {join_words(word)}, false);
      return value_of(name);
    }
    if (op == "+") return set ? join_words(word) : "";
    if (op == "?") {
      if (!set) notes.push_back(fmt::format("line {}: {} is not set (the script asks for it)", line, name));
      return value_of(name);
    }
    notes.push_back(fmt::format("line {}: ${{{}}} is not evaluated; it expanded to nothing", line, shown(inside)));
    return "";
  }

  // Integer arithmetic of $((...)): + - * / % and parentheses over numbers and names.
  long long arithmetic(const std::string& expression) {
    std::string text;
    for (std::size_t i = 0; i < expression.size();) {
      if (expression[i] == '$') {
        text += expand_dollar(expression, i);
      } else {
        text += expression[i++];
      }
      if (text.size() > kMaxExpandedBytes) too_large("$((...))");
    }
    std::size_t at = 0;
    const long long value = sum(text, at);
    skip_space(text, at);
    if (at != text.size()) fail(fmt::format("$(({})): cannot evaluate (only + - * / % on integers)", shown(expression)));
    return value;
  }
  [[noreturn]] void overflow(long long left, char op, long long right) const {
    fail(fmt::format("$((...)): {} {} {} overflows 64-bit integers", left, op, right));
  }
  static void skip_space(const std::string& text, std::size_t& at) {
    while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at])) != 0) ++at;
  }
  long long sum(const std::string& text, std::size_t& at) {
    long long value = product(text, at);
    for (skip_space(text, at); at < text.size() && (text[at] == '+' || text[at] == '-'); skip_space(text, at)) {
      const char op = text[at++];
      const long long left = value, right = product(text, at);
      const bool overflows = op == '+' ? __builtin_add_overflow(left, right, &value)
                                       : __builtin_sub_overflow(left, right, &value);
      if (overflows) overflow(left, op, right);
    }
    return value;
  }
  long long product(const std::string& text, std::size_t& at) {
    long long value = operand(text, at);
    for (skip_space(text, at); at < text.size() && std::string("*/%").find(text[at]) != std::string::npos;
         skip_space(text, at)) {
      const char op = text[at++];
      const long long right = operand(text, at);
      if (op != '*' && right == 0) fail("$((...)): division by zero");
      if (op == '*') {
        const long long left = value;
        if (__builtin_mul_overflow(left, right, &value)) overflow(left, op, right);
      } else if (right == -1) {  // LLONG_MIN / -1 traps; the remainder of any x by -1 is 0
        if (op == '/' && value == LLONG_MIN) overflow(value, op, right);
        value = op == '/' ? -value : 0;
      } else {
        value = op == '/' ? value / right : value % right;
      }
    }
    return value;
  }
  long long operand(const std::string& text, std::size_t& at) {
    skip_space(text, at);
    if (at < text.size() && text[at] == '(') {
      const Nested nested(*this);
      ++at;
      const long long value = sum(text, at);
      skip_space(text, at);
      if (at >= text.size() || text[at] != ')') fail("$((...)): a parenthesis is not closed");
      ++at;
      return value;
    }
    if (at < text.size() && text[at] == '-') {
      const Nested nested(*this);
      const long long value = operand(text, ++at);
      if (value == LLONG_MIN) fail(fmt::format("$((...)): -({}) overflows 64-bit integers", value));
      return -value;
    }
    if (at < text.size() && text[at] == '+') {
      const Nested nested(*this);
      return operand(text, ++at);
    }
    const std::size_t start = at;
    while (at < text.size() && is_name_char(text[at])) ++at;
    const std::string token = text.substr(start, at - start);
    if (token.empty()) fail("$((...)): expected a number or a name");
    if (std::isdigit(static_cast<unsigned char>(token[0])) != 0) {
      try {
        return std::stoll(token);
      } catch (const std::exception&) {
        fail(fmt::format("$((...)): '{}' is not a 64-bit integer", shown(token)));
      }
    }
    const std::string value = value_of(token);
    try {
      return value.empty() ? 0 : std::stoll(value);
    } catch (const std::exception&) {
      fail(fmt::format("$((...)): {} = '{}' is not a 64-bit integer", shown(token), shown(value)));
    }
  }

  std::string source_;
  std::map<std::string, std::vector<std::string>> vars_;
  std::vector<std::string> positional_;
  int depth_ = 0;  // expansions and parentheses open now (Nested)
};

bool is_control_keyword(const std::string& word) {
  for (const char* keyword : {"if", "then", "elif", "else", "fi", "for", "while", "until", "do", "done", "case", "esac",
                              "function", "select", "{", "}"})
    if (word == keyword) return true;
  return false;
}

int launcher_count(const std::vector<std::string>& words, std::size_t end, const std::string& dash, const std::string& underscore) {
  for (std::size_t i = 0; i < end; ++i) {
    std::string value;
    for (const std::string& name : {dash, underscore}) {
      if (words[i] == name && i + 1 < end) value = words[i + 1];
      if (words[i].rfind(name + "=", 0) == 0) value = words[i].substr(name.size() + 1);
    }
    if (value.empty()) continue;
    try {
      std::size_t used = 0;
      const int count = std::stoi(value, &used);
      return used == value.size() && count > 0 ? count : 0;
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// `NAME=value`, `NAME+=value` or an array `NAME=( ... )`, whose elements may run over
// lines up to the closing parenthesis (`n` then moves to that line).
void assign_variable(Shell& shell, const Assignment& assignment, const std::vector<std::string>& lines, std::size_t& n) {
  const std::string& name = assignment.name;
  const bool append = assignment.append;
  const std::string& value = assignment.value;
  if (!value.empty() && value[0] == '(') {
    // An array: its elements may run over lines up to the closing parenthesis.
    std::string body = value.substr(1);
    std::string elements;
    std::size_t close = closing_parenthesis(body);
    while (close == std::string::npos) {
      elements += body + "\n";
      if (++n >= lines.size()) shell.fail(fmt::format("the array {}=( is not closed", name));
      body = lines[n];
      close = closing_parenthesis(body);
    }
    elements += body.substr(0, close);
    shell.assign(name, shell.words(elements, false), append);
  } else {
    std::string joined;
    for (const auto& word : shell.words(value, false)) joined += (joined.empty() ? "" : " ") + word;
    shell.assign(name, {joined}, append);
  }
}

}  // namespace

LaunchCommand read_launch_script(const std::string& raw_text, const std::string& source,
                                 const std::vector<std::string>& positional) {
  // Backslash-newline joins lines, as bash does before anything else.
  std::string text;
  for (std::size_t i = 0; i < raw_text.size(); ++i) {
    if (raw_text[i] == '\\' && i + 1 < raw_text.size() && raw_text[i + 1] == '\n') {
      text += ' ';
      ++i;
    } else if (raw_text[i] != '\r') {
      text += raw_text[i];
    }
  }
  std::vector<std::string> lines;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }

  Shell shell(source);
  ShellConditionals conditionals;
  const ShellConditionals::Expand expand = [&](const std::string& text) { return shell.words(text, false); };
  const ShellConditionals::Fail fail = [&](const std::string& what) { shell.fail(what); };
  LaunchCommand command;
  std::vector<std::string> bare_options;  // lines that are only options (no program)
  bool found_program = false;
  ShellBlocks blocks;
  const ShellBlocks::Test test = [&](const std::string& condition) {
    return conditionals.condition_value(condition, expand, fail, shell.notes, shell.line);
  };
  const ShellBlocks::Assign assign = [&](const std::string& name, const std::string& value) {
    shell.assign(name, {value}, false);
  };
  shell.set_positional(positional);
  for (std::size_t n = 0; n < lines.size(); ++n) {
    shell.line = int(n + 1);
    std::string first = lines[n];
    first.erase(0, first.find_first_not_of(" \t"));
    if (first.empty() || first[0] == '#') continue;
    // After the training command the script only cleans up or reports: nothing read there changes the run.
    if (found_program) break;
    std::deque<std::string> statements{first};
    while (!statements.empty()) {
      std::string line = std::move(statements.front());
      statements.pop_front();
      line.erase(0, line.find_first_not_of(" \t"));
      if (line.empty() || line[0] == '#') continue;
      if (conditionals.handle(line, expand, fail, shell.notes, shell.line, blocks.active())) continue;
      const ShellBlocks::Step step =
          blocks.handle(lines, n, line, conditionals.active(), expand, test, assign, fail);
      if (step.jump) {
        n = *step.jump - 1;
        break;
      }
      if (step.consumed) {
        statements.insert(statements.begin(), step.rest.begin(), step.rest.end());
        continue;
      }
      if (!conditionals.active() || !blocks.active()) continue;
      if (const std::vector<std::string> parts = split_statements(line); parts.size() > 1) {
        statements.insert(statements.begin(), parts.begin(), parts.end());
        continue;
      }
      if (const auto assignment = parse_assignment(line)) {
        assign_variable(shell, *assignment, lines, n);
        continue;
      }
      const std::vector<std::string> words = shell.words(line);
      if (words.empty()) continue;
      if (words[0] == "shift") {
        shell.shift(words.size() > 1 ? std::size_t(std::max(0, std::atoi(words[1].c_str()))) : 1);
        continue;
      }
      if (is_control_keyword(words[0]) || ends_with(words[0], "()")) {
        shell.fail(fmt::format("shell '{}' is not evaluated (loops, cases and functions depend on the machine); flatten "
                               "the script to the commands it runs",
                               shown(words[0])));
      }
      std::size_t program_at = words.size();
      for (std::size_t i = 0; i < words.size(); ++i) {
        if (ends_with(words[i], ".py")) {
          program_at = i;
          break;
        }
      }
      if (program_at < words.size()) {
        found_program = true;
        command.program = words[program_at];
        command.args.assign(words.begin() + std::ptrdiff_t(program_at) + 1, words.end());
        command.nproc_per_node = launcher_count(words, program_at, "--nproc-per-node", "--nproc_per_node");
        command.nnodes = launcher_count(words, program_at, "--nnodes", "--nnodes");
      } else if (words[0].rfind("--", 0) == 0) {
        bare_options.insert(bare_options.end(), words.begin(), words.end());
      }
    }
  }
  if (!found_program && blocks.open()) throw Error(fmt::format("{}: a loop or case block is not closed", source));
  if (!found_program && conditionals.open()) throw Error(fmt::format("{}: an if block is not closed with fi", source));
  if (!found_program) command.args = std::move(bare_options);
  if (command.args.empty()) {
    throw Error(fmt::format("{}: no training command (a line running pretrain_gpt.py or similar) and no options found",
                            source));
  }
  command.notes = std::move(shell.notes);
  return command;
}

}  // namespace tessel::interop::detail
