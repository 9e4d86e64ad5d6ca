// The fixture of the `tessel` command's tests: each test gets its own folder (removed
// after it) and runs the binary with the profile database isolated there, capturing the
// exit status, stdout and stderr. Shared by the CLI suites so they run tessel alike.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../tessel_binary.hpp"

namespace tessel_cli_test {

namespace fs = std::filesystem;

// The smallest plan that trains: 2 layers on two CPU ranks.
inline const char* kTinyPlan = R"({"model": {"name": "small", "layers": 2, "hidden": 64, "heads": 4,
  "vocab": 256, "seq_len": 64}, "cluster": "local-cpu", "train": {"global_batch": 8, "precision": "fp32"},
  "parallel": {"dp": 2, "micro_batch": 2}})";

// The published corpus of measured runs.
inline std::string published_corpus() { return std::string(TESSEL_SOURCE_DIR) + "/corpus/published"; }

// The losses a run printed, in order (the 8 characters after each " loss ").
inline std::vector<std::string> printed_losses(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t at = text.find(" loss "); at != std::string::npos; at = text.find(" loss ", at + 1)) {
    out.push_back(text.substr(at + 6, 8));
  }
  return out;
}

struct Outcome {
  int status = -1;
  std::string out, err;
};

inline std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A refusal as tessel's inputs promise it: status 2, one line on stderr naming
// `expected_part`, nothing on stdout.
inline ::testing::AssertionResult is_one_line_refusal(const Outcome& o, const std::string& expected_part) {
  if (o.status != 2) return ::testing::AssertionFailure() << "status " << o.status << "\n" << o.out << o.err;
  if (o.err.find(expected_part) == std::string::npos)
    return ::testing::AssertionFailure() << "stderr lacks '" << expected_part << "': " << o.err;
  if (std::count(o.err.begin(), o.err.end(), '\n') != 1) return ::testing::AssertionFailure() << "not one line: " << o.err;
  if (!o.out.empty()) return ::testing::AssertionFailure() << "stdout not empty: " << o.out;
  return ::testing::AssertionSuccess();
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    // A parameterised test's name has a '/' ("Name/param"): one folder, so that TearDown
    // removes all that SetUp made.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("tessel_cli_" + std::to_string(::getpid()) + "_" + name);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs tessel with its profile database isolated in this test's folder unless the
  // arguments name one; `launcher` (e.g. "mpirun -np 2") starts it when given.
  Outcome run(const std::string& args, const std::string& launcher = "") {
    const std::string command = "TESSEL_DB=" + (dir_ / "default.db").string() + " " + launcher + " " +
                                std::string(TESSEL_BINARY) +
                                " " + args + " >" + (dir_ / "out").string() + " 2>" + (dir_ / "err").string() +
                                " </dev/null";
    const int raw = std::system(command.c_str());
    Outcome outcome;
    outcome.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    outcome.out = slurp(dir_ / "out");
    outcome.err = slurp(dir_ / "err");
    return outcome;
  }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }

  fs::path dir_;
};

}  // namespace tessel_cli_test
