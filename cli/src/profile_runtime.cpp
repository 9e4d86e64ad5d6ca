// profile_runtime.hpp: the run goes through the tessel binary next to this one (the same
// build), its database in a temporary folder removed afterwards.
#include "profile_runtime.hpp"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/json_fields.hpp"
#include "tessel/core/subprocess.hpp"
#include "tessel/profiles/run_store.hpp"

namespace tessel::cli {

namespace {
// The small 2-rank plan of the CPU suite's data-parallel case.
constexpr const char* kRuntimePlan = R"({"model": {"name": "runtime-probe", "layers": 2, "hidden": 64, "heads": 4,
  "vocab": 256, "seq_len": 64}, "cluster": "local-cpu", "train": {"global_batch": 8, "precision": "fp32"},
  "parallel": {"dp": 2, "micro_batch": 2}})";

class ScratchFolder {
 public:
  ScratchFolder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessel-runtime-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw Error("profile: cannot make a scratch folder for the runtime run");
    path_ = pattern;
  }
  ~ScratchFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};
}  // namespace

double measure_rank_runtime_bytes() {
  const ScratchFolder scratch;
  const std::string plan = (scratch.path() / "plan.json").string(), db = (scratch.path() / "runs.db").string();
  write_text_file_atomically(plan, kRuntimePlan);
  std::error_code error;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", error).string();
  int status = -1;
  const std::string output = run_command(fmt::format("{} run --plan {} --steps 2 --db {} 2>&1", shell_quote(self),
                                                     shell_quote(plan), shell_quote(db)),
                                         status);
  if (status != 0) {
    throw Error(fmt::format("profile: measuring the runtime of a rank (tessel run --steps 2 of a 2-rank GPT) failed: {}",
                            output.substr(output.rfind('\n', output.size() - 2) + 1)));
  }
  profiles::ProfileStore store(db, profiles::ProfileStore::Access::read_only);
  const profiles::RunStore runs(store);
  std::vector<double> runtimes;
  for (const RankMemoryMeasured& m : runs.rank_memory(runs.runs().back().id)) {
    runtimes.push_back(m.process_peak_bytes - m.total_peak_bytes);
  }
  if (runtimes.empty()) throw Error("profile: the runtime run recorded no memory");
  std::sort(runtimes.begin(), runtimes.end());
  const std::size_t n = runtimes.size();
  return n % 2 == 1 ? runtimes[n / 2] : 0.5 * (runtimes[n / 2 - 1] + runtimes[n / 2]);
}

void set_measured_runtime(DeviceSpec& device, double measured_bytes) {
  const double libraries = build_links_cuda_libraries() ? device.cuda_libraries_bytes : 0.0;
  device.workspace_bytes = std::max(0.0, measured_bytes - libraries);
  device.sources["workspace_bytes"] = fmt::format(
      "measured by tessel profile on this build ({} the CUDA libraries): {:.1f} MiB, the median over ranks of the "
      "process's peak resident set less the trainer's peak tensor bytes in tessel run --steps 2 of a 2-rank GPT{}",
      build_links_cuda_libraries() ? "linking" : "without", measured_bytes / double(1 << 20),
      libraries > 0 ? fmt::format(", less cuda_libraries_bytes {:.1f} MiB", libraries / double(1 << 20)) : "");
}

}  // namespace tessel::cli
