// The while and for loops and case blocks of launch scripts, evaluated where they depend
// only on the script's own variables and positional arguments: Megatron-LM's examples
// parse their arguments with `while [[ $# -gt 0 ]]; do case $1 in ... esac; done` and
// choose a model size with `case "$MODEL_SCALE" in 800M) ... ;; esac`. Loops run at most
// kMaxIterations turns in all; a loop or case that reads anything else is refused by line.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tessel::interop::detail {

// `a; b` as {"a", "b"} (semicolons outside quotes; `;;` and a lone statement stay whole).
std::vector<std::string> split_statements(const std::string& line);

// The first `)` of `text` outside quotes and before a comment (the end of a case pattern,
// of an array's elements), or npos.
std::size_t closing_parenthesis(const std::string& text);

struct Assignment {
  std::string name;
  bool append = false;
  std::string value;
};
// `[export|declare [-a]|local|readonly] NAME[+]=value`, or nullopt when `line` is none.
std::optional<Assignment> parse_assignment(const std::string& line);

class ShellBlocks {
 public:
  static constexpr int kMaxIterations = 1000;  // loop turns, all loops together
  static constexpr long kMaxStars = 8;         // '*' in one case pattern
  using Expand = std::function<std::vector<std::string>(const std::string&)>;
  using Test = std::function<bool(const std::string&)>;  // a [ ]/[[ ]] condition's value
  using Assign = std::function<void(const std::string&, const std::string&)>;
  using Fail = std::function<void(const std::string&)>;

  struct Step {
    bool consumed = false;           // the line opened, closed or chose a block
    std::optional<std::size_t> jump;  // the next line to read, when not the following one
    // Statements to read next, in order: what follows a case pattern on its line, and a
    // branch's last statement before the `;;` that closes it.
    std::vector<std::string> rest;
  };
  // `line` (blanks trimmed) at index `n` of `lines`; `enclosing_active`: whether the
  // if blocks around it run.
  Step handle(const std::vector<std::string>& lines, std::size_t n, const std::string& line, bool enclosing_active,
              const Expand& words, const Test& test, const Assign& assign, const Fail& fail);
  // Whether the lines now read run (every enclosing loop and case branch taken).
  bool active() const { return frames_.empty() || frames_.back().active; }
  bool open() const { return !frames_.empty(); }

 private:
  enum class Kind { loop, case_block };
  struct Frame {
    Kind kind = Kind::loop;
    bool outer_active = true;
    bool active = false;
    // loops
    std::size_t body = 0;  // first line of the body
    std::string condition;  // while: the test; for: the variable
    std::vector<std::string> values;  // for: the words left to take
    // case blocks
    std::string subject;
    bool taken = false;
    bool in_branch = false;
  };
  std::vector<Frame> frames_;
  int turns_ = 0;
};

}  // namespace tessel::interop::detail
