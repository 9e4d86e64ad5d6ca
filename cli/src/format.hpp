// Human-readable output for the CLI: sizes, times and aligned tables. Machine-readable
// output is JSON (--json) or CSV (--csv); these helpers are for terminals only.
#pragma once

#include <string>
#include <vector>

namespace tessel::cli {

std::string format_bytes(double bytes);        // "61.3 GiB"
std::string format_seconds(double seconds);    // "812 ms", "1.23 s", "3.4 h"
std::string format_rate(double per_second);    // "1.52M"
std::string format_count(double count);        // "3,801,600"

class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void add_row(std::vector<std::string> cells);
  std::string render() const;  // right-aligned numbers, left-aligned text

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// Progress bar on stderr, drawn only on a terminal and only after `delay_s`.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label, double delay_s = 1.0);
  void update(double fraction, double elapsed_s);
  void finish();

 private:
  std::string label_;
  double delay_s_;
  bool drawn_ = false;
  bool terminal_;
};

}  // namespace tessel::cli
