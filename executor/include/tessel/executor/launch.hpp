// How the ranks of `tessel run` come to exist, as pure functions of the environment (a map, so
// tests pass their own) and the plan: this process's rank, size and node rank from the launchers'
// variables (Open MPI, PMI, srun tasks, torchrun's RANK/WORLD_SIZE/LOCAL_RANK); which launcher
// (inside one -> worker; SLURM_JOB_ID -> srun; else mpirun); its command line. The run command
// and the worker both ask these, so the two ends never disagree.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessel::executor {

using Environment = std::map<std::string, std::string>;

// This process's environment as a map.
Environment process_environment();

// What a launcher told this process. Fields are unset where no known variable says.
struct LaunchedRank {
  std::optional<int> rank, world_size, local_rank;
  std::string source;  // the variable family that said so ("OMPI_COMM_WORLD_RANK", ...)
  bool inside_launcher() const { return rank.has_value() && world_size.has_value(); }
};
// Throws tessel::Error naming the variable when one is set but is not a non-negative
// integer (or a world size below 1, or a rank outside it).
LaunchedRank read_launched_rank(const Environment& environment);

enum class Launcher { automatic, mpirun, srun, none };
// "auto", "mpirun", "srun", "none"; throws tessel::Error naming --launcher otherwise.
Launcher parse_launcher(const std::string& text);
const char* to_string(Launcher launcher);
// `automatic` made concrete: none inside a launcher, srun in a Slurm job, else mpirun.
Launcher resolve_launcher(Launcher requested, const Environment& environment);

struct LaunchRequest {
  int world_size = 1;
  // Ranks each node runs: a GPU cluster's devices per node; the world on local-cpu.
  int ranks_per_node = 1;
  std::string hostfile;  // mpirun only: the nodes and their slots
  std::string worker;    // the tessel-rank binary
  std::vector<std::string> worker_arguments;
};
// The launcher's argv (not a shell string: callers quote it). Throws tessel::Error for
// `none` and `automatic` (nothing to launch), and for a hostfile with srun.
std::vector<std::string> launch_command(Launcher launcher, const LaunchRequest& request);

}  // namespace tessel::executor
