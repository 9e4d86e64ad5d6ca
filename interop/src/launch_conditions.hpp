// The if/elif/else/fi of launch scripts (as Megatron's own examples choose options),
// evaluated where the test reads only the script's variables: [ ] and [[ ]] tests of
// strings and integers, !, || and &&. File tests (-f, -d, -e, -x, -s) are taken as true
// (the script's files are assumed present) and noted; any other test is refused by line,
// since its branch depends on the machine.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tessel::interop::detail {

class ShellConditionals {
 public:
  // The words of a text after expansion (quotes kept whole, empty words dropped).
  using Expand = std::function<std::vector<std::string>(const std::string&)>;
  // Throws tessel::Error naming the line.
  using Fail = std::function<void(const std::string&)>;

  // True when `line` (leading blanks removed) is an if, elif, else or fi line, which is
  // then consumed here.
  // `enclosing_active`: whether the loops and case branches around it run.
  bool handle(const std::string& line, const Expand& words, const Fail& fail, std::vector<std::string>& notes,
              int line_number, bool enclosing_active = true);
  // The value of a condition of [ ] and [[ ]] tests (a while loop's).
  bool condition_value(const std::string& condition, const Expand& words, const Fail& fail,
                       std::vector<std::string>& notes, int line_number) const {
    return evaluate(condition, words, fail, notes, line_number);
  }
  // Whether the lines now read run (every enclosing branch taken).
  bool active() const { return frames_.empty() || frames_.back().active; }
  bool open() const { return !frames_.empty(); }

 private:
  struct Frame {
    bool outer_active = true;
    bool taken = false;
    bool active = false;
  };
  bool evaluate(const std::string& condition, const Expand& words, const Fail& fail, std::vector<std::string>& notes,
                int line_number) const;
  std::vector<Frame> frames_;
};

}  // namespace tessel::interop::detail
