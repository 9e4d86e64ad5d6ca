// The launch decisions of launch.hpp. Variable families are read in a fixed order
// (Open MPI, PMI, Slurm, torchrun), the first that names both a rank and a world size
// wins, so a process started by mpirun inside a Slurm job reads mpirun's numbering.
#include "tessel/executor/launch.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

extern char** environ;

namespace tessel::executor {

namespace {

struct VariableFamily {
  const char *rank, *world_size, *local_rank;
  // Set only in the launched processes (not null): a Slurm batch script has
  // SLURM_PROCID=0 and SLURM_NTASKS too, but only srun's tasks have a step id.
  const char* launched_marker;
};
// Where each launcher puts a process's numbering. Local ranks without a family of their
// own (MPI_LOCALRANKID: MPICH's Hydra and Intel MPI) are looked up after these.
constexpr VariableFamily kFamilies[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", nullptr},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", nullptr},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_ID"},
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", nullptr},
};
constexpr const char* kLocalRankVariables[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK",
                                               "MPI_LOCALRANKID"};

std::optional<int> integer_variable(const Environment& environment, const char* name) {
  const auto found = environment.find(name);
  if (found == environment.end() || found->second.empty()) return std::nullopt;
  const std::string& text = found->second;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size() || value < 0 || value > 1 << 24) {
    throw Error(fmt::format("environment: {}={}: must be a non-negative integer", name, text));
  }
  return int(value);
}

}  // namespace

Environment process_environment() {
  Environment out;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string text = *entry;
    const std::size_t equals = text.find('=');
    if (equals != std::string::npos) out.emplace(text.substr(0, equals), text.substr(equals + 1));
  }
  return out;
}

LaunchedRank read_launched_rank(const Environment& environment) {
  LaunchedRank out;
  for (const VariableFamily& family : kFamilies) {
    if (family.launched_marker && environment.count(family.launched_marker) == 0) continue;
    const auto rank = integer_variable(environment, family.rank);
    const auto world = integer_variable(environment, family.world_size);
    if (!rank || !world) continue;
    if (*world < 1) throw Error(fmt::format("environment: {}={}: a world has at least 1 rank", family.world_size, *world));
    if (*rank >= *world) {
      throw Error(fmt::format("environment: {}={} is outside {}={}", family.rank, *rank, family.world_size, *world));
    }
    out.rank = rank;
    out.world_size = world;
    out.source = family.rank;
    out.local_rank = integer_variable(environment, family.local_rank);
    break;
  }
  for (const char* name : kLocalRankVariables) {
    if (out.local_rank) break;
    out.local_rank = integer_variable(environment, name);
  }
  return out;
}

Launcher parse_launcher(const std::string& text) {
  if (text == "auto") return Launcher::automatic;
  if (text == "mpirun") return Launcher::mpirun;
  if (text == "srun") return Launcher::srun;
  if (text == "none") return Launcher::none;
  throw Error(fmt::format("--launcher: must be auto, mpirun, srun or none, got {}", text));
}

const char* to_string(Launcher launcher) {
  switch (launcher) {
    case Launcher::automatic: return "auto";
    case Launcher::mpirun: return "mpirun";
    case Launcher::srun: return "srun";
    case Launcher::none: return "none";
  }
  return "?";
}

Launcher resolve_launcher(Launcher requested, const Environment& environment) {
  if (requested != Launcher::automatic) return requested;
  if (read_launched_rank(environment).inside_launcher()) return Launcher::none;
  if (environment.count("SLURM_JOB_ID") != 0) return Launcher::srun;
  return Launcher::mpirun;
}

std::vector<std::string> launch_command(Launcher launcher, const LaunchRequest& request) {
  if (request.world_size < 1 || request.ranks_per_node < 1) {
    throw Error(fmt::format("internal: launch of {} ranks, {} per node", request.world_size, request.ranks_per_node));
  }
  const int per_node = std::min(request.ranks_per_node, request.world_size);
  std::vector<std::string> argv;
  switch (launcher) {
    case Launcher::mpirun:
      argv = {"mpirun", "--allow-run-as-root", "-np", std::to_string(request.world_size)};
      if (request.hostfile.empty()) {
        // One machine: every rank here, however many cores it has.
        argv.push_back("--oversubscribe");
      } else {
        argv.insert(argv.end(), {"-hostfile", request.hostfile});
        // A GPU cluster: exactly one rank per device on each node, whatever slots the
        // hostfile gives; on local-cpu the hostfile's slots place the ranks.
        if (per_node < request.world_size) argv.insert(argv.end(), {"--map-by", fmt::format("ppr:{}:node", per_node)});
      }
      break;
    case Launcher::srun:
      if (!request.hostfile.empty()) {
        throw Error("--hostfile: srun takes its nodes from the Slurm allocation; use --launcher mpirun with a hostfile");
      }
      // A rank that fails ends the job's other ranks (no rank waits forever on it).
      argv = {"srun", fmt::format("--ntasks={}", request.world_size), fmt::format("--ntasks-per-node={}", per_node),
              "--kill-on-bad-exit=1"};
      break;
    case Launcher::automatic:
    case Launcher::none:
      throw Error(fmt::format("internal: launcher {} has no command line", to_string(launcher)));
  }
  argv.push_back(request.worker);
  argv.insert(argv.end(), request.worker_arguments.begin(), request.worker_arguments.end());
  return argv;
}

}  // namespace tessel::executor
