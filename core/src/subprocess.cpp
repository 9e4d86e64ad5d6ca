#include "tessel/core/subprocess.hpp"

#include <sys/wait.h>

#include <cstdio>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel {

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string run_command(const std::string& command, int& exit_status) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw Error(fmt::format("cannot run '{}'", command));
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  const int raw = pclose(pipe);
  exit_status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return output;
}

}  // namespace tessel
