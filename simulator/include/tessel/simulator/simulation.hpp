// The SimGrid cluster simulator: replays a plan's Program on a model of the cluster, op by op,
// so contention between flows, overlap between streams and pipeline bubbles show up as they
// would on the machines. The platform (from the ClusterSpec, every figure from CostLookup) and
// the replay of ops and collectives as flows are described in docs/SIMULATOR.md. SimGrid runs
// one engine per process: one simulation per process.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "tessel/core/chrome_trace.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/core/program.hpp"
#include "tessel/profiles/profile.hpp"

namespace tessel::simulator {

struct SimulationOptions {
  bool overlap = true;           // false: each rank runs its ops one at a time, in program order
  bool contention_free = false;  // FATPIPE links: flows never share bandwidth
  bool record_trace = false;     // keep every op's start and end
  // Fold data-parallel replicas: simulate only the replicas that fill the first nodes of
  // each stage; the others run the same program on symmetric links, so their flows are
  // represented by the simulated ones (see fold_replicas in simulation.cpp).
  bool fold = true;
  // With `fold`, also fold the ranks of a 1D tensor-parallel group that sits inside one
  // fat-tree node into its first rank: they run the same program over identical links, so
  // one stands for the group (see tensor_fold in simulation.cpp). Off: the pre-folding run.
  bool fold_tensor = true;
  // Run a ring collective's steps as one flow per neighbour pair carrying all its bytes
  // (exact on uniform links: every step moves the same share over the same pairs).
  // Off: every latency step is its own round of flows.
  bool aggregate = true;
  // Build only the fat-tree nodes that hold a simulated rank or receive one of its flows
  // (the others carry nothing). Off: every node, as before the pruning (for benchmarks).
  bool prune_platform = true;
  std::string platform_file;     // a SimGrid platform XML instead of the built one
  // Called now and then (at most twice a second of wall time) with the share of the ops
  // replayed so far, for a progress line; empty: never.
  std::function<void(double)> on_progress;
};

struct RankBreakdown {
  double compute_s = 0;          // compute stream busy
  double exposed_comm_s = 0;     // compute stream waiting on tensor, sequence or data-parallel comm
  double bubble_s = 0;           // compute stream waiting on the pipeline
  double idle_s = 0;             // the rest of the step
};

struct TraceEvent {
  int rank = 0;
  Stream stream = Stream::compute;
  std::uint32_t op = 0;  // index in the rank's stage program
  double start_s = 0, end_s = 0;
};

struct LinkUse {
  std::string name;
  double busy_fraction = 0;  // bytes carried / (bandwidth x step time)
  double bytes = 0;
};

// Micro-batch chunks whose activations a stage holds, after each change.
struct InFlightSample {
  double time_s = 0;
  int chunks = 0;
};

struct SimulationResult {
  double step_time_s = 0;
  std::vector<RankBreakdown> ranks;
  std::vector<LinkUse> busiest_links;  // at most ten, busiest first
  std::vector<TraceEvent> events;      // with record_trace
  std::vector<std::vector<InFlightSample>> in_flight;  // per pipeline stage
  std::size_t flows = 0;
  int simulated_ranks = 0;  // after folding
  int platform_nodes = 0;   // nodes built in the platform (SimulationOptions::prune_platform)
  double wall_s = 0;
};

SimulationResult simulate(const Program& program, const profiles::Profile& profile, const SimulationOptions& options);

// Point-to-point flows started together on the cluster's platform; returns when each
// finished. For checking what link sharing does.
struct Flow {
  int from = 0, to = 0;
  double bytes = 0;
};
std::vector<double> simulate_flows(const ClusterSpec& cluster, int nodes, int gpus_per_node,
                                   const profiles::Profile& profile, const std::vector<Flow>& flows,
                                   bool contention_free = false);

// Memory of one stage: bytes that do not change during the step (weights, gradients,
// optimizer states, workspace) and activation bytes per micro-batch chunk in flight.
struct StageMemory {
  double static_bytes = 0;
  double chunk_bytes = 0;
};

// The traced events as timed ops named by the Program's ids (which they view).
std::vector<TimedOp> timed_ops(const Program& program, const SimulationResult& result);

// Chrome trace JSON (Perfetto): pid = rank, tid = stream, ph "X" events in microseconds
// named by op id, memory per stage as ph "C" counters on the stage's first rank.
std::string chrome_trace(const Program& program, const SimulationResult& result,
                         const std::vector<StageMemory>& memory);

}  // namespace tessel::simulator
