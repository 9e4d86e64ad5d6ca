// A test fixture with an empty folder of its own, removed after the test; named by suite,
// process and test so that tests running at once (ctest -j2) never share one.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tessel::test {

// The whole of a file as bytes; "" when it cannot be read.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class ScratchFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() / ("tessel_" + std::string(test->test_suite_name()) + "_" +
                                                     std::to_string(::getpid()) + "_" + test->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // The path of `name` inside the folder.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `text` to `name` inside the folder; its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return path(name);
  }
  std::filesystem::path dir_;
};

}  // namespace tessel::test
