#include "refine.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "commands.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/subprocess.hpp"

namespace tessel::cli {

namespace fs = std::filesystem;

std::vector<double> simulate_in_children(const std::vector<Plan>& plans, const std::string& db, int jobs,
                                         ProgressBar* bar) {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) throw Error("--refine: cannot find the tessel binary (/proc/self/exe)");
  const fs::path dir = fs::temp_directory_path() / fmt::format("tessel-refine-{}", ::getpid());
  fs::create_directories(dir);
  std::vector<double> seconds(plans.size(), -1);
  std::vector<std::string> failures(plans.size());
  std::atomic<std::size_t> next{0}, done{0};
  const auto start = std::chrono::steady_clock::now();
  std::mutex progress;
  auto worker = [&] {
    for (std::size_t i = next++; i < plans.size(); i = next++) {
      if (cancel_flag().load()) return;
      const fs::path file = dir / fmt::format("plan{}.json", i);
      write_text_file_atomically(file.string(), plans[i].to_json().dump() + "\n");
      std::string command = shell_quote(self.string()) + " simulate --json --plan " + shell_quote(file.string());
      if (!db.empty()) command += " --db " + shell_quote(db);
      int status = 0;
      const std::string output = run_command(command + " 2>&1", status);
      try {
        if (status != 0) throw std::runtime_error(output);
        seconds[i] = Json::parse(output).at("step_time_s").get<double>();
      } catch (const std::exception& e) {
        failures[i] = e.what();
      }
      ++done;
      if (bar != nullptr) {
        std::lock_guard lock(progress);
        bar->update(double(done) / plans.size(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, jobs); ++t) threads.emplace_back(worker);
  for (auto& thread : threads) thread.join();
  fs::remove_all(dir, error);
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (!failures[i].empty()) {
      throw Error(fmt::format("--refine: simulating plan {} failed: {}", plans[i].parallel.summary(), failures[i]));
    }
  }
  return seconds;
}

}  // namespace tessel::cli
