// The replay: every rank's StageProgram runs as SimGrid actors on the platform, compute ops
// sleeping for their profiled time and collectives moving their bytes as concurrent flows,
// so contention, overlap and the pipeline's bubbles come out of the run, not a formula.
// Ranks whose programs and traffic replicate another's are folded into it (fold_replicas);
// groups of ranks come from core's RankLayout.
#include "tessel/simulator/simulation.hpp"
#include "tessel/core/stage_layers.hpp"

#include "flows.hpp"
#include "platform.hpp"
#include "replay_state.hpp"
#include "stage_tables.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>
#include <simgrid/s4u.hpp>

#include "tessel/core/error.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/profiles/cost_lookup.hpp"

namespace tessel::simulator {

namespace sg4 = simgrid::s4u;

namespace {

constexpr double kNotDone = -1.0;

class Replay {
 public:
  Replay(const Program& program, const profiles::Profile& profile, const SimulationOptions& options)
      : program_(program),
        plan_(program.plan()),
        options_(options),
        costs_(profile, plan_.cluster, plan_.nodes, plan_.gpus_per_node()) {
    costs_.device().check_precision(plan_.train.precision);
    costs_.set_plan_kind(plan_.train.framework, plan_.train.kernels);
    // Merged sleeps change no time, but a trace wants every op's own events and the
    // contention ledger charges debts op by op.
    const bool join = !options_.record_trace && !ComputeContention(costs_.calibration()).active();
    for (int s = 0; s < program_.stages(); ++s) tables_.push_back(stage_tables(program_, s, costs_, options_.overlap, join));
  }

  SimulationResult run() {
    const auto wall_start = std::chrono::steady_clock::now();
    auto engine = make_engine();
    tensor_fold_ = tensor_fold();
    network_.emplace(platform_, program_.world_size(), plan_.gpus_per_node(), options_.aggregate,
                     costs_.calibration().collective_call_overhead_s);
    fold_replicas();
    build_platform(*engine);
    start_actors();
    engine->run();

    SimulationResult result;
    result.flows = network_->flows();
    for (const RankState& rank : ranks_) result.step_time_s = std::max(result.step_time_s, rank.last_end_s);
    for (RankState& rank : ranks_) {
      // A folded rank reports its representative's breakdown: it ran the same program.
      RankBreakdown b = ranks_[std::size_t(representative_[std::size_t(rank.rank)])].breakdown;
      b.idle_s = std::max(0.0, result.step_time_s - b.compute_s - b.exposed_comm_s - b.bubble_s);
      result.ranks.push_back(b);
    }
    result.simulated_ranks = int(std::count(simulated_.begin(), simulated_.end(), true));
    result.platform_nodes = platform_.built_nodes;
    result.busiest_links =
        busiest_links(network_->load(), platform_.device_bandwidth, platform_.node_bandwidth, result.step_time_s);
    result.events = std::move(events_);
    result.in_flight = std::move(memory_);
    result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    return result;
  }

 private:
  // ---------------------------------------------------------------- platform
  void build_platform(sg4::Engine& engine) {
    if (!options_.platform_file.empty()) {
      if (!std::filesystem::is_regular_file(options_.platform_file)) {
        throw Error(fmt::format("--platform: {}: no such file", options_.platform_file));
      }
      try {
        engine.load_platform(options_.platform_file);
      } catch (const std::exception& error) {
        throw Error(fmt::format("--platform: {}: {}", options_.platform_file, error.what()));
      }
      platform_.hosts = engine.get_all_hosts();
      if (int(platform_.hosts.size()) < program_.world_size()) {
        throw Error(fmt::format("--platform: {} has {} hosts, the plan needs {} (one per rank, in order)",
                                options_.platform_file, platform_.hosts.size(), program_.world_size()));
      }
      platform_.nodes = (program_.world_size() + plan_.gpus_per_node() - 1) / plan_.gpus_per_node();
      platform_.built_nodes = platform_.nodes;
      platform_.intra_alpha_s = costs_.intra_latency_s();
      platform_.inter_alpha_s = std::max(costs_.inter_latency_s(), platform_.intra_alpha_s);
      platform_.device_bandwidth = costs_.intra_bandwidth_bytes_per_s();
      platform_.node_bandwidth = costs_.inter_bandwidth_per_device_bytes_per_s() * plan_.gpus_per_node();
    } else {
      platform_ = build_cluster_platform(plan_.cluster, costs_, program_.world_size(), plan_.gpus_per_node(),
                                         options_.contention_free, tensor_fold_,
                                         options_.prune_platform ? nodes_reached() : std::vector<bool>{});
    }
  }

  int node_of(int rank) const { return rank / plan_.gpus_per_node(); }

  // The nodes that hold a simulated rank or receive one of its flows: each distinct
  // collective of a stage over each simulated rank's group, and its pipeline transfers.
  std::vector<bool> nodes_reached() const {
    const RankLayout& layout = program_.layout();
    std::vector<bool> nodes(std::size_t((program_.world_size() + plan_.gpus_per_node() - 1) / plan_.gpus_per_node()));
    const int stages = layout.size(Axis::pp);
    for (int s = 0; s < program_.stages(); ++s) {
      std::map<std::tuple<CommGroup, Collective, CollectiveAlgorithm>, const BlockOp*> collectives;
      std::vector<int> peer_offsets;
      for (const ProgramOp& op : program_.stage(s).ops) {
        if (op.work.kind == OpKind::collective) {
          collectives.emplace(std::tuple{op.work.group, op.work.collective, op.work.algorithm}, &op.work);
        } else if (op.work.kind == OpKind::send &&
                   std::find(peer_offsets.begin(), peer_offsets.end(), op.peer_offset) == peer_offsets.end()) {
          peer_offsets.push_back(op.peer_offset);
        }
      }
      for (int r = layout.first_rank_of_stage(s); r < layout.first_rank_of_stage(s) + layout.ranks_per_stage(); ++r) {
        if (!simulated_[std::size_t(r)]) continue;
        nodes[std::size_t(node_of(r))] = true;
        for (const auto& [key, work] : collectives) {
          network_->mark_nodes_reached(*work, layout.members(r, work->group), nodes);
        }
        for (int offset : peer_offsets) {
          network_->mark_transfer_nodes(r, layout.with(r, Axis::pp, (s + offset + stages) % stages), nodes);
        }
      }
    }
    return nodes;
  }

  const RankState::Group& group_of(RankState& rank, CommGroup kind) {
    RankState::Group& group = rank.groups[std::size_t(kind)];
    if (group.simulated < 0) {
      group.members = program_.layout().members(rank.rank, kind);
      group.simulated = int(std::count_if(group.members.begin(), group.members.end(),
                                          [&](int r) { return simulated_[std::size_t(r)]; }));
    }
    return group;
  }

  // ---------------------------------------------------------------- waiting
  // Blocks the calling actor until `op`'s dependencies are done.
  void wait_until_ready(RankState& rank, std::size_t actor, std::uint32_t op) {
    while (!rank.ready(op)) {
      rank.waiting_for[actor] = op;
      sg4::this_actor::suspend();
    }
  }

  void mark_done(RankState& rank, std::uint32_t op, double end_s) {
    rank.done_s[op] = end_s;
    for (std::size_t a = 0; a < rank.actors.size(); ++a) {
      if (rank.waiting_for[a] != kWaitingForNothing && rank.ready(rank.waiting_for[a])) {
        rank.waiting_for[a] = kWaitingForNothing;
        rank.actors[a]->resume();
      }
    }
  }

  static void wait_for(Meeting& meeting, sg4::Actor* self) {
    while (!meeting.finished) {
      meeting.waiting.push_back(self);
      sg4::this_actor::suspend();
    }
  }

  static void finish(Meeting& meeting) {
    meeting.finished = true;
    for (sg4::Actor* actor : meeting.waiting) actor->resume();
    meeting.waiting.clear();
  }

  // Every member arrives; the last one runs the collective; all leave when it ends.
  // Groups of one stage are named by the op's index and their first member; the tied
  // embedding's pair spans two stage programs and is named by the op's id.
  Meeting& meeting_of(std::uint32_t index, const ProgramOp& op, int first_member) {
    if (op.work.group == CommGroup::embedding) return named_meetings_[fmt::format("{}@{}", op.id, first_member)];
    return meetings_[std::uint64_t(index) * std::uint64_t(program_.world_size()) + std::uint64_t(first_member)];
  }

  // A pipeline transfer's edge, named alike by both ends: its micro-batch, the virtual
  // stage that sends, the pass and the sending rank.
  Meeting& transfer_meeting(const StageTables::Edge& edge, int source) {
    const std::uint64_t virtual_stages = std::uint64_t(plan_.parallel.pp) * std::uint64_t(chunks_per_stage(plan_.parallel));
    const std::uint64_t key =
        ((std::uint64_t(edge.micro_batch) * virtual_stages + std::uint64_t(edge.source_virtual_stage)) * 2 +
         std::uint64_t(edge.backward)) * std::uint64_t(program_.world_size()) + std::uint64_t(source);
    return transfers_[key];
  }

  // ---------------------------------------------------------------- ops
  void execute(RankState& rank, std::size_t actor, std::uint32_t index) {
    const ProgramOp& op = rank.program->ops[index];
    switch (op.work.kind) {
      case OpKind::collective: {
        const RankState::Group& group = group_of(rank, op.work.group);
        if (group.members.size() < 2) return;
        Meeting& meeting = meeting_of(index, op, group.members.front());
        if (++meeting.arrived == group.simulated) {
          network_->collective(op.work, group.members);
          finish(meeting);
        } else {
          wait_for(meeting, rank.actors[actor]);
        }
        return;
      }
      case OpKind::send:
      case OpKind::recv: {
        // Eager transfer: the send moves the data as soon as it is posted (receives are
        // posted ahead in real runtimes), the receive waits for it to have arrived.
        const RankLayout& layout = program_.layout();
        const int stages = layout.size(Axis::pp);
        const int peer = layout.with(rank.rank, Axis::pp, (layout.stage_of(rank.rank) + op.peer_offset + stages) % stages);
        const bool sending = op.work.kind == OpKind::send;
        Meeting& meeting = transfer_meeting(rank.tables->edges[index], sending ? rank.rank : peer);
        if (sending) {
          network_->transfer(rank.rank, peer, op.work.bytes);
          const double call_overhead_s = costs_.calibration().collective_call_overhead_s;
          if (call_overhead_s > 0) sg4::this_actor::sleep_for(call_overhead_s);
          finish(meeting);
        } else {
          wait_for(meeting, rank.actors[actor]);
        }
        return;
      }
      case OpKind::copy: {
        // Offload traffic on the device's own link to host memory.
        sg4::Host* device = platform_.hosts[std::size_t(rank.rank)];
        sg4::Host* memory = platform_.node_memory.empty() ? nullptr : platform_.node_memory[std::size_t(node_of(rank.rank))];
        const auto bytes = std::uint64_t(std::llround(op.work.bytes));
        if (memory == nullptr) {
          sg4::this_actor::sleep_for(costs_.host_device_time_s(op.work.bytes));
        } else if (ops::copies_to_host(op.id)) {
          sg4::Comm::sendto(device, memory, bytes);
        } else {
          sg4::Comm::sendto(memory, device, bytes);
        }
        return;
      }
      default:
        sg4::this_actor::sleep_for(rank.tables->seconds[index] + rank.contention.debt_paid_by_s(index));
        return;
    }
  }

  // The compute ops at positions first..last of the actor's list, which wait for nothing
  // after the first starts: one sleep, each op's end placed by its own seconds.
  void run_joined(RankState& rank, const std::vector<std::uint32_t>& list, std::size_t first, std::size_t last,
                  double start_s) {
    double total_s = 0;
    for (std::size_t p = first; p <= last; ++p) total_s += rank.tables->seconds[list[p]];
    sg4::this_actor::sleep_for(total_s);
    const double end_s = sg4::Engine::get_clock();
    double at_s = start_s;
    for (std::size_t p = first; p <= last; ++p) {
      at_s = p == last ? end_s : at_s + rank.tables->seconds[list[p]];
      track_memory(rank, list[p], at_s);
      if (p < last) rank.done_s[list[p]] = at_s;
    }
    rank.breakdown.compute_s += end_s - start_s;
    rank.last_end_s = std::max(rank.last_end_s, end_s);
    mark_done(rank, list[last], end_s);
  }

  void run_actor(RankState& rank, std::size_t actor, bool compute_stream) {
    const std::vector<std::uint32_t>& list = rank.tables->actor_ops[actor];
    const std::vector<bool>& joins = rank.tables->joins_next[actor];
    for (std::size_t position = 0; position < list.size(); ++position) {
      const std::uint32_t index = list[position];
      const ProgramOp& op = rank.program->ops[index];
      const double ready_wait_start = sg4::Engine::get_clock();
      wait_until_ready(rank, actor, index);
      const double start = sg4::Engine::get_clock();
      if (compute_stream && start > ready_wait_start) {
        // Attribute the wait to the dependency that finished last.
        std::uint32_t last_dep = op.deps.empty() ? index : op.deps.front();
        for (std::uint32_t d : op.deps) {
          if (rank.done_s[d] > rank.done_s[last_dep]) last_dep = d;
        }
        const Stream waited_on = rank.program->ops[last_dep].stream;
        const double waited = start - ready_wait_start;
        if (waited_on == Stream::pp_comm) rank.breakdown.bubble_s += waited;
        else if (waited_on != Stream::compute) rank.breakdown.exposed_comm_s += waited;
      }
      if (joins[position]) {
        std::size_t last = position;
        while (joins[last]) ++last;
        run_joined(rank, list, position, last, start);
        position = last;
        continue;
      }
      const bool busy = computes(op);
      const auto mark = rank.contention.op_started(op, busy, start);
      execute(rank, actor, index);
      rank.contention.op_ended(mark);
      const double end = sg4::Engine::get_clock();
      if (busy) {
        rank.breakdown.compute_s += end - start;
      } else if (compute_stream) {
        // Only without overlap does the compute actor itself wait in communication.
        (op.work.kind == OpKind::recv ? rank.breakdown.bubble_s : rank.breakdown.exposed_comm_s) += end - start;
      }
      if (options_.record_trace) events_.push_back({rank.rank, op.stream, index, start, end});
      track_memory(rank, index, end);
      rank.last_end_s = std::max(rank.last_end_s, end);
      mark_done(rank, index, end);
      note_progress();
    }
  }

  void note_progress() {
    if (!options_.on_progress || ++ops_done_ % 256 != 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_progress_ < std::chrono::milliseconds(500)) return;
    last_progress_ = now;
    options_.on_progress(double(ops_done_) / double(std::max<std::size_t>(ops_total_, 1)));
  }

  // Micro-batch chunks whose activations a stage holds: +1 when a chunk's forward
  // starts its first layer, -1 when its backward finishes the first layer.
  void track_memory(const RankState& rank, std::uint32_t index, double time) {
    const int change = rank.tables->in_flight_change[index];
    if (change == 0) return;
    const int stage = program_.layout().stage_of(rank.rank);
    if (rank.rank != program_.layout().first_rank_of_stage(stage)) return;  // one rank per stage
    auto& samples = memory_[std::size_t(stage)];
    const int previous = samples.empty() ? 0 : samples.back().chunks;
    samples.push_back({time, previous + change});
  }

  // Data-parallel replicas run identical programs; their collectives are symmetric
  // rings. Simulating the replicas that fill whole nodes keeps every shared link's load
  // as it would be: the simulated nodes' uplinks carry all their devices' flows, and a
  // ring step into a folded node arrives on its downlink as one flow per rail, as in the
  // full run. A folded rank's flows are represented by its simulated counterpart's.
  void fold_replicas() {
    const ParallelConfig& p = plan_.parallel;
    const int world = program_.world_size();
    const int per_replica = program_.layout().group_size(kTensorAxes | axes(Axis::sp));
    int kept = p.dp;
    // Exact by symmetry on the star-of-nodes fat-tree; torus and dragonfly routes are not
    // symmetric between replicas, so they are simulated in full.
    const bool symmetric = !plan_.cluster.inter_node || plan_.cluster.inter_node->topology == Topology::fat_tree;
    // Expert-parallel all-to-alls couple data-parallel replicas: simulated in full.
    if (options_.fold && options_.platform_file.empty() && symmetric && p.ep == 1) {
      kept = std::clamp(plan_.gpus_per_node() / per_replica, 1, p.dp);
      if (per_replica * kept % plan_.gpus_per_node() != 0 && per_replica < plan_.gpus_per_node()) kept = p.dp;
    }
    simulated_.assign(std::size_t(world), false);
    representative_.assign(std::size_t(world), 0);
    std::vector<int> receiver(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      const RankLayout& layout = program_.layout();
      const int replica = layout.coordinate(r, Axis::dp);
      const bool tensor_first = tensor_fold_ == 1 || layout.coordinate(r, Axis::tp_col) == 0;
      receiver[std::size_t(r)] = tensor_fold_ == 1 ? r : layout.with(r, Axis::tp_col, 0);
      simulated_[std::size_t(r)] = replica < kept && tensor_first;
      representative_[std::size_t(r)] = layout.with(receiver[std::size_t(r)], Axis::dp, replica % kept);
    }
    network_->set_simulated(simulated_, std::move(receiver));
  }

  // How many ranks one simulated rank stands for along the tensor axis: a 1D tensor group
  // inside one node of a fat-tree runs one program on identical device links, and every
  // group it meets outside (pipeline, data, sequence) pairs ranks of the same tensor index,
  // so rotating that index maps the whole run onto itself. Its first rank stands for it;
  // the node's uplink, shared by all, gets 1/tp of its bandwidth (platform.cpp). Offload
  // copies (one host-memory link per node) and PCIe switches (shared by device pairs) break
  // the rotation, as do expert all-to-alls. ZeRO's per-micro-batch collectives keep it: the
  // engine's eager (not lazy) sharing updates keep symmetric ranks in step (make_engine).
  int tensor_fold() const {
    const ParallelConfig& p = plan_.parallel;
    const bool fat_tree = !plan_.cluster.inter_node || plan_.cluster.inter_node->topology == Topology::fat_tree;
    if (!options_.fold || !options_.fold_tensor || !options_.platform_file.empty() || !fat_tree || p.ep != 1 ||
        p.tp < 2 || p.tp_mode != TpMode::d1 || plan_.gpus_per_node() % p.tp != 0 ||
        plan_.cluster.intra_node.kind == "pcie") {
      return 1;
    }
    for (int s = 0; s < program_.stages(); ++s) {
      const auto& ops = program_.stage(s).ops;
      if (std::any_of(ops.begin(), ops.end(), [](const ProgramOp& op) { return op.work.kind == OpKind::copy; })) return 1;
    }
    return p.tp;
  }

  // One actor per simulated rank, or per stream of it when streams overlap.
  std::size_t actor_count() const {
    std::size_t actors = 0;
    for (int r = 0; r < program_.world_size(); ++r) {
      if (!simulated_[std::size_t(r)]) continue;
      const auto& lists = tables_[std::size_t(program_.stage_of_rank(r))].actor_ops;
      actors += std::size_t(std::count_if(lists.begin(), lists.end(), [](const auto& list) { return !list.empty(); }));
    }
    return actors;
  }

  void start_actors() {
    refuse_actor_stacks_beyond_address_space(actor_count());
    const int world = program_.world_size();
    ranks_.resize(std::size_t(world));
    memory_.assign(std::size_t(plan_.parallel.pp), {});
    for (int r = 0; r < world; ++r) {
      RankState& rank = ranks_[std::size_t(r)];
      rank.rank = r;
      if (!simulated_[std::size_t(r)]) continue;
      rank.program = &program_.rank_program(r);
      rank.tables = &tables_[std::size_t(program_.stage_of_rank(r))];
      ops_total_ += rank.program->ops.size();
      rank.done_s.assign(rank.program->ops.size(), kNotDone);
      rank.contention = ComputeContention(costs_.calibration());
      for (std::uint32_t i = 0; i < rank.program->ops.size(); ++i) {
        const ProgramOp& op = rank.program->ops[i];
        if (computes(op) && op.work.kind != OpKind::copy) rank.contention.set_step_payer(i);  // the last one pays the step's contention
      }
      const std::size_t actors = rank.tables->actor_ops.size();
      rank.actors.assign(actors, nullptr);
      rank.waiting_for.assign(actors, kWaitingForNothing);
      for (std::size_t a = 0; a < actors; ++a) {
        if (rank.tables->actor_ops[a].empty()) continue;
        const bool compute = !options_.overlap || a == std::size_t(Stream::compute);
        const std::string name = options_.overlap ? fmt::format("rank{}-{}", r, to_string(Stream(a))) : fmt::format("rank{}", r);
        actors_.push_back(sg4::Actor::create(name, platform_.hosts[std::size_t(r)],
                                             [this, &rank, a, compute] { run_actor(rank, a, compute); }));
        rank.actors[a] = actors_.back().get();
      }
    }
  }

  const Program& program_;
  const Plan& plan_;
  SimulationOptions options_;
  profiles::CostLookup costs_;
  std::vector<StageTables> tables_;
  ClusterPlatform platform_;
  std::optional<FlowNetwork> network_;
  std::vector<RankState> ranks_;
  std::vector<sg4::ActorPtr> actors_;
  std::vector<bool> simulated_;
  std::vector<int> representative_;
  int tensor_fold_ = 1;  // ranks each simulated rank stands for along the tensor axis
  std::unordered_map<std::uint64_t, Meeting> meetings_, transfers_;
  std::map<std::string, Meeting> named_meetings_;
  std::size_t ops_total_ = 0, ops_done_ = 0;  // for on_progress
  std::chrono::steady_clock::time_point last_progress_ = std::chrono::steady_clock::now();
  std::vector<TraceEvent> events_;
  std::vector<std::vector<InFlightSample>> memory_;
};

}  // namespace

std::vector<double> simulate_flows(const ClusterSpec& cluster, int nodes, int gpus_per_node,
                                   const profiles::Profile& profile, const std::vector<Flow>& flows,
                                   bool contention_free) {
  const profiles::CostLookup costs(profile, cluster, nodes, gpus_per_node);
  auto engine = make_engine();
  const ClusterPlatform platform =
      build_cluster_platform(cluster, costs, nodes * gpus_per_node, gpus_per_node, contention_free);
  std::vector<double> finish(flows.size(), 0);
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const Flow flow = flows[i];
    if (flow.from < 0 || flow.to < 0 || flow.from >= int(platform.hosts.size()) || flow.to >= int(platform.hosts.size())) {
      throw Error(fmt::format("simulate_flows: flow {} names a rank outside 0..{}", i, platform.hosts.size() - 1));
    }
    sg4::Actor::create(fmt::format("flow{}", i), platform.hosts[std::size_t(flow.from)], [&, i, flow] {
      sg4::Comm::sendto(platform.hosts[std::size_t(flow.from)], platform.hosts[std::size_t(flow.to)],
                        std::uint64_t(std::llround(flow.bytes)));
      finish[i] = sg4::Engine::get_clock();
    });
  }
  engine->run();
  return finish;
}

SimulationResult simulate(const Program& program, const profiles::Profile& profile, const SimulationOptions& options) {
  Replay replay(program, profile, options);
  return replay.run();
}

}  // namespace tessel::simulator
