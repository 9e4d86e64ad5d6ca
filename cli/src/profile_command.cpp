// `tessel profile`: measure this machine into the profile database, show what the
// planner will believe, and move profiles in and out (JSON, nccl-tests results).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "format.hpp"
#include "profile_cuda.hpp"
#include "profile_runtime.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/input_file.hpp"
#include "tessel/profiles/cost_lookup.hpp"
#include "tessel/profiles/cpu_profiler.hpp"
#include "tessel/profiles/link_fit.hpp"
#include "tessel/profiles/nccl_tests.hpp"
#include "tessel/profiles/profile_store.hpp"

namespace tessel::cli {

namespace {
using namespace tessel::profiles;

struct ProfileArgs {
  std::string backend;
  std::optional<int> cuda_device;  // --device N with --backend cuda
  bool quick = false;
  int max_ranks = 0;
  std::string db;
  // show
  std::string device;
  // export / import
  std::string out_file;
  std::string in_file;
  // import-nccl
  std::string fabric;
  std::string collective;
  int ranks = 0;
  CLI::App* show = nullptr;
  CLI::App* export_cmd = nullptr;
  CLI::App* import_cmd = nullptr;
  CLI::App* import_nccl = nullptr;
};

std::string db_path(const ProfileArgs& args) { return args.db.empty() ? ProfileStore::default_path() : args.db; }

std::string helper_path() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  const auto helper = self.parent_path() / "tessel-mpi-bench";
  if (error || !std::filesystem::exists(helper)) {
    throw Error("profile: tessel-mpi-bench is missing next to the tessel binary; rebuild (make test builds it)");
  }
  return helper.string();
}

// What a profile says it did not measure, a line each. The meta comes from outside
// (imported files): a reason that is not text is printed as the JSON it is.
void print_not_measured(const Profile& profile) {
  if (!profile.meta.is_object() || !profile.meta.contains("not_measured")) return;
  const Json& notes = profile.meta.at("not_measured");
  if (!notes.is_object()) return;
  for (const auto& [what, why] : notes.items()) {
    std::cout << fmt::format("not measured: {}: {}\n", what, why.is_string() ? why.get<std::string>() : why.dump());
  }
}

}  // namespace

void measure_into(ProfileStore& store, const std::string& label,
                  const std::function<Profile(const ProfileProgress&)>& measure) {
  const bool terminal = isatty(STDERR_FILENO) == 1;
  ProgressBar bar("profiling " + label, 0.0);
  const auto start = std::chrono::steady_clock::now();
  const ProfileProgress progress = [&](double fraction, const std::string& what) {
    const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (terminal) bar.update(fraction, elapsed_s);
    else std::fprintf(stderr, "profile: [%3.0f%%] %7.1f s  %s\n", 100 * fraction, elapsed_s, what.c_str());
  };
  Profile profile;
  try {
    profile = measure(progress);
  } catch (...) {
    bar.finish();
    throw;
  }
  bar.finish();
  store.replace_profile(profile);
  int flagged = 0;
  for (const auto& sample : profile.kernels) flagged += sample.flagged;
  for (const auto& sample : profile.links) flagged += sample.flagged;
  std::cout << fmt::format("measured {} kernel and {} link samples ({} flagged noisy) into {} as device {}\n",
                           profile.kernels.size(), profile.links.size(), flagged, store.path(), profile.device.name);
  print_not_measured(profile);
  std::cout << fmt::format("see them: tessel profile show --device {} --db {}\n", profile.device.name, store.path());
}

namespace {

int run_measure(const ProfileArgs& args) {
  if (args.backend.empty()) throw Error("--backend: required to measure (cpu); or use a subcommand: show, export, import, import-nccl");
  if (args.backend == "cuda") return run_profile_cuda(db_path(args), args.cuda_device.value_or(0), args.quick);
  if (args.cuda_device) throw Error("--device: only with --backend cuda (which CUDA device to measure)");
  if (args.max_ranks < 0 || args.max_ranks == 1) {
    throw Error(fmt::format("--max-ranks: must be at least 2, got {}", args.max_ranks));
  }
  ProfileStore store(db_path(args));  // opened and checked first: a bad database fails before minutes of measuring
  store.check_integrity();
  CpuProfileOptions options;
  options.quick = args.quick;
  options.max_ranks = args.max_ranks;
  options.mpi_bench = helper_path();
  options.cancel = &cancel_flag();
  measure_into(store, "this machine's CPU", [&](const ProfileProgress& progress) {
    options.on_progress = progress;
    Profile profile = profile_cpu(options);
    progress(1.0, "the runtime of a rank of this build (tessel run --steps 2 of a 2-rank GPT)");
    set_measured_runtime(profile.device, measure_rank_runtime_bytes());
    return profile;
  });
  return 0;
}

int run_show(const ProfileArgs& args) {
  std::vector<std::string> devices;
  const std::string path = db_path(args);
  // A database named on the command line must exist: falling back to the shipped
  // profiles would print tables as if it had been read.
  if (!args.db.empty() && !std::filesystem::exists(args.db)) {
    throw Error(fmt::format("--db: {}: no such database (tessel profile creates one)", args.db));
  }
  if (!args.device.empty()) {
    devices.push_back(args.device);
  } else if (std::filesystem::exists(path) && !(std::filesystem::is_regular_file(path) &&
                                                std::filesystem::file_size(path) == 0)) {
    devices = ProfileStore(path, ProfileStore::Access::read_only).devices();
  }
  if (devices.empty()) {
    std::cout << fmt::format("no profiles in {}; showing the shipped local-cpu profile (--device D for others)\n", path);
    devices.push_back("local-cpu");
  }
  for (const std::string& name : devices) {
    const Profile profile = resolve_profile(name, args.db);
    const DeviceSpec& d = profile.device;
    std::cout << fmt::format("device {} ({}), profile source: {}\n", d.name, d.kind,
                             profile.meta.value("source", std::string("?")));
    std::cout << fmt::format("  peak fp32 {:.1f} GFLOP/s, bf16 {:.1f} GFLOP/s; memory {}; bandwidth {:.1f} GB/s\n",
                             d.peak_fp32_flops_per_s / 1e9, d.peak_bf16_flops_per_s / 1e9, format_bytes(d.memory_bytes),
                             d.memory_bandwidth_bytes_per_s / 1e9);
    Table gemm({"precision", "m", "n", "k", "time", "GFLOP/s", "of peak", "spread", "source"});
    Table stream({"op", "elements", "time", "GB/s", "spread", "source"});
    Table attention({"precision", "b", "h", "s", "d", "time", "TFLOP/s (causal)", "spread"});
    bool has_attention = false;
    for (const KernelSample& s : profile.kernels) {
      if (s.op == KernelOp::attention) {
        has_attention = true;
        // Causal forward: QK^T and PV over half the score matrix, 2 FLOP per multiply-add.
        const double flops = 2.0 * double(s.b) * double(s.h) * double(s.s) * double(s.s) * double(s.d);
        attention.add_row({s.precision, std::to_string(s.b), std::to_string(s.h), std::to_string(s.s),
                           std::to_string(s.d), format_seconds(s.seconds), fmt::format("{:.1f}", flops / s.seconds / 1e12),
                           fmt::format("{:.0f}%{}", 100 * s.spread, s.flagged ? " noisy" : "")});
      } else if (s.op == KernelOp::gemm) {
        const double peak = s.precision == "fp32" ? d.peak_fp32_flops_per_s
                            : s.precision == "tf32" ? d.peak_tf32_flops_per_s
                            : s.precision == "bf16" ? d.peak_bf16_flops_per_s
                                                    : d.peak_fp16_flops_per_s;
        gemm.add_row({s.precision, std::to_string(s.m), std::to_string(s.n), std::to_string(s.k),
                      format_seconds(s.seconds), fmt::format("{:.1f}", s.gemm_flops() / s.seconds / 1e9),
                      fmt::format("{:.0f}%", 100 * s.gemm_flops() / s.seconds / peak),
                      fmt::format("{:.0f}%{}", 100 * s.spread, s.flagged ? " noisy" : ""), std::string(to_string(s.source))});
      } else if (streamed_bytes_per_element(s.op) > 0) {
        stream.add_row({std::string(to_string(s.op)), std::to_string(s.elements), format_seconds(s.seconds),
                        fmt::format("{:.2f}", s.elements * streamed_bytes_per_element(s.op) / s.seconds / 1e9),
                        fmt::format("{:.0f}%{}", 100 * s.spread, s.flagged ? " noisy" : ""),
                        std::string(to_string(s.source))});
      }
    }
    std::cout << "\nGEMM\n" << gemm.render();
    std::cout << "\nstreaming kernels (bytes per element: triad 12, copy 8, norm/softmax 12)\n" << stream.render();
    if (has_attention) std::cout << "\nfused attention forward\n" << attention.render();
    print_not_measured(profile);
    if (!profile.links.empty()) {
      Table links({"fabric", "collective", "ranks", "bytes", "time", "algbw GB/s", "busbw GB/s", "spread"});
      std::map<std::string, int> fabrics;
      for (const LinkSample& s : profile.links) {
        ++fabrics[s.fabric];
        const double algbw = s.bytes / s.seconds;
        links.add_row({s.fabric, std::string(to_string(s.collective)), std::to_string(s.ranks), format_bytes(s.bytes),
                       format_seconds(s.seconds), fmt::format("{:.3f}", algbw / 1e9),
                       fmt::format("{:.3f}", algbw * bus_bandwidth_factor(s.collective, s.ranks) / 1e9),
                       fmt::format("{:.0f}%{}", 100 * s.spread, s.flagged ? " noisy" : "")});
      }
      std::cout << "\ncollectives (busbw as nccl-tests defines it)\n" << links.render();
      // The alpha-beta fits the planner uses: per collective, and over the whole fabric.
      Table fits({"fabric", "collective", "latency/step", "busbw GB/s", "samples", "worst error"});
      for (const auto& [fabric, count] : fabrics) {
        auto add = [&, fabric = fabric](const std::string& label, const std::optional<LinkFit>& fit) {
          if (!fit) return;
          fits.add_row({fabric, label, format_seconds(fit->alpha_s), fmt::format("{:.2f}", fit->bus_bandwidth_bytes_per_s / 1e9),
                        std::to_string(fit->samples), fmt::format("{:.0f}%", 100 * fit->max_relative_error)});
        };
        for (int op = 0; op < 7; ++op) {
          add(std::string(to_string(Collective(op))), fit_link(profile.links, fabric, CollectiveAlgorithm::ring, Collective(op)));
        }
        add("(all)", fit_link(profile.links, fabric));
      }
      std::cout << "\nalpha-beta fits (seconds = latency x steps + size x busfactor / busbw)\n" << fits.render();
    }
    std::cout << "\n";
  }
  return 0;
}

int run_export(const ProfileArgs& args) {
  const Profile profile = resolve_profile(args.device, args.db);
  write_text_file_atomically(args.out_file, profile.to_json().dump(1) + "\n");
  std::cout << fmt::format("wrote {} ({} kernel, {} link samples)\n", args.out_file, profile.kernels.size(),
                           profile.links.size());
  return 0;
}

int run_import(const ProfileArgs& args) {
  const Profile profile = Profile::from_json(read_json_file(args.in_file), args.in_file);
  ProfileStore store(db_path(args));
  store.replace_profile(profile);
  std::cout << fmt::format("imported {} into {} as device {}\n", args.in_file, store.path(), profile.device.name);
  return 0;
}

int run_import_nccl(const ProfileArgs& args) {
  const std::string text = read_input_file(args.in_file);
  NcclImportOptions options;
  options.fabric = args.fabric;
  options.ranks = args.ranks;
  if (!args.collective.empty()) {
    options.collective = collective_from_name(args.collective);
    if (!options.collective) {
      throw Error(fmt::format("--collective: must be one of all_reduce|all_gather|reduce_scatter|broadcast|reduce|"
                              "send_recv|all_to_all, got '{}'", args.collective));
    }
  }
  std::vector<LinkSample> samples = import_nccl_tests(text, args.in_file, options);
  for (auto& sample : samples) sample.host = host_name(), sample.date = today_utc();
  ProfileStore store(db_path(args));
  store.add_link_samples(samples);
  std::cout << fmt::format("imported {} {} samples on {} ranks into {} (fabric {})\n", samples.size(),
                           to_string(samples.front().collective), samples.front().ranks, store.path(), args.fabric);
  return 0;
}
}  // namespace

Command add_profile_command(CLI::App& app) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* cmd = app.add_subcommand("profile", "Measure kernel and link costs into the profile database, or show them");
  cmd->require_subcommand(0, 1);
  cmd->add_option("--backend", args->backend,
                  "What to measure: cpu (this machine as local-cpu) or cuda (one GPU through the CUDA backend)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--device", args->cuda_device, "With --backend cuda: the CUDA device index (default 0)");
  cmd->add_flag("--quick", args->quick, "Fewer, smaller shapes and sizes (under a minute)");
  cmd->add_option("--max-ranks", args->max_ranks, "Largest MPI world for collectives (default: the core count)");
  cmd->add_option("--db", args->db, "Profile database (default: $TESSEL_DB, else ~/.local/share/tessel/tessel.db)");
  cmd->footer("Examples:\n  tessel profile --backend cpu --quick\n  tessel profile --backend cuda --device 0\n  tessel profile show --device local-cpu\n"
              "  tessel profile import-nccl all_reduce.txt --fabric dgx-h100/intra");

  args->show = cmd->add_subcommand("show", "Print a profile as tables: what the planner will believe");
  args->show->add_option("--device", args->device, "Device (default: every device in the database)");
  args->show->add_option("--db", args->db, "Profile database");

  args->export_cmd = cmd->add_subcommand("export", "Write one device's profile as JSON (the profiles/data/ format)");
  args->export_cmd->add_option("--device", args->device, "Device")->required();
  args->export_cmd->add_option("--out,-o", args->out_file, "JSON file to write")->required();
  args->export_cmd->add_option("--db", args->db, "Profile database");

  args->import_cmd = cmd->add_subcommand("import", "Load a profile JSON into the database, replacing that device's samples");
  args->import_cmd->add_option("file", args->in_file, "Profile JSON")->required();
  args->import_cmd->add_option("--db", args->db, "Profile database");

  args->import_nccl = cmd->add_subcommand("import-nccl", "Add nccl-tests results (text table or JSON) as link samples");
  args->import_nccl->add_option("file", args->in_file, "nccl-tests output")->required();
  args->import_nccl->add_option("--fabric", args->fabric, "Fabric measured: <cluster>/intra or <cluster>/inter")->required();
  args->import_nccl->add_option("--collective", args->collective, "When the file does not say (all_reduce, ...)");
  args->import_nccl->add_option("--ranks", args->ranks, "When the file does not say");
  args->import_nccl->add_option("--db", args->db, "Profile database");

  return [args] {
    if (args->show->parsed()) return run_show(*args);
    if (args->export_cmd->parsed()) return run_export(*args);
    if (args->import_cmd->parsed()) return run_import(*args);
    if (args->import_nccl->parsed()) return run_import_nccl(*args);
    return run_measure(*args);
  };
}

}  // namespace tessel::cli
