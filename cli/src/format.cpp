#include "format.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

namespace tessel::cli {

std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (std::abs(bytes) >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, kUnits[unit]);
}

std::string format_seconds(double seconds) {
  if (!std::isfinite(seconds)) return "inf";
  if (seconds < 1e-3) return fmt::format("{:.1f} us", seconds * 1e6);
  if (seconds < 1) return fmt::format("{:.1f} ms", seconds * 1e3);
  if (seconds < 120) return fmt::format("{:.2f} s", seconds);
  if (seconds < 7200) return fmt::format("{:.1f} min", seconds / 60);
  if (seconds < 3 * 86400) return fmt::format("{:.1f} h", seconds / 3600);
  return fmt::format("{:.1f} days", seconds / 86400);
}

std::string format_rate(double value) {
  if (value >= 1e9) return fmt::format("{:.2f}G", value / 1e9);
  if (value >= 1e6) return fmt::format("{:.2f}M", value / 1e6);
  if (value >= 1e3) return fmt::format("{:.1f}k", value / 1e3);
  return fmt::format("{:.1f}", value);
}

std::string format_count(double count) {
  std::string digits = fmt::format("{:.0f}", count);
  std::string out;
  int group = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (group == 3 && *it != '-') {
      out.push_back(',');
      group = 0;
    }
    out.push_back(*it);
    ++group;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render() const {
  std::vector<std::size_t> widths(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) {
    widths[c] = headers_[c].size();
    for (const auto& row : rows_) widths[c] = std::max(widths[c], row[c].size());
  }
  auto numeric = [](const std::string& cell) {
    return !cell.empty() && (std::isdigit(static_cast<unsigned char>(cell[0])) || cell[0] == '-' || cell[0] == '.');
  };
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) out += "  ";
      const bool right = !header && numeric(cells[c]);
      out += right ? fmt::format("{:>{}}", cells[c], widths[c]) : fmt::format("{:<{}}", cells[c], widths[c]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(headers_, true);
  std::size_t total = 0;
  for (auto width : widths) total += width + 2;
  out += std::string(total > 2 ? total - 2 : 0, '-') + "\n";
  for (const auto& row : rows_) out += line(row, false);
  return out;
}

ProgressBar::ProgressBar(std::string label, double delay_s)
    : label_(std::move(label)), delay_s_(delay_s), terminal_(isatty(STDERR_FILENO) == 1) {}

void ProgressBar::update(double fraction, double elapsed_s) {
  if (!terminal_ || elapsed_s < delay_s_) return;
  constexpr int kWidth = 30;
  const int filled = std::clamp(int(fraction * kWidth), 0, kWidth);
  std::fprintf(stderr, "\r%s [%s%s] %3.0f%%  %.1f s  (Ctrl-C cancels)", label_.c_str(), std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), fraction * 100, elapsed_s);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) {
    std::fprintf(stderr, "\r%*s\r", 100, "");
    std::fflush(stderr);
  }
  drawn_ = false;
}

}  // namespace tessel::cli
