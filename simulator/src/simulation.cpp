// The replay: every rank's StageProgram runs as SimGrid actors on the platform
// (platform.hpp), compute ops sleeping for their profiled time and collectives moving
// their bytes over the links as concurrent flows, so that contention, overlap and the
// pipeline's bubbles come out of the run instead of a formula. Ranks whose programs and
// traffic are replicas of another's are folded into it (fold_replicas) to keep large
// plans fast. Groups of ranks come from core's RankLayout.
#include "tessel/simulator/simulation.hpp"
#include "tessel/core/stage_layers.hpp"

#include "layer_overhead.hpp"
#include "platform.hpp"
#include "replay_state.hpp"
#include "sequential_order.hpp"
#include "tp_overlap.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <simgrid/s4u.hpp>

#include "tessel/core/error.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/profiles/collectives.hpp"
#include "tessel/profiles/cost_lookup.hpp"

namespace tessel::simulator {

namespace sg4 = simgrid::s4u;
using profiles::bus_bandwidth_factor;
using profiles::collective_steps;

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
    for (int s = 0; s < program_.stages(); ++s) {
      layer_overhead_s_.push_back(layer_overheads_s(program_.stage(s), costs_.calibration().layer_overhead_s,
                                                    replay_pays_layer_overhead(plan_.parallel.recompute)));
      tp_overlap_s_.push_back(tp_overlap_adjustments_s(program_, program_.stage(s), costs_));
    }
  }

  SimulationResult run() {
    const auto wall_start = std::chrono::steady_clock::now();
    auto engine = make_engine();
    build_platform(*engine);
    fold_replicas();
    start_actors();
    engine->run();

    SimulationResult result;
    result.flows = flows_;
    for (const RankState& rank : ranks_) result.step_time_s = std::max(result.step_time_s, rank.last_end_s);
    for (RankState& rank : ranks_) {
      // A folded rank reports its representative's breakdown: it ran the same program.
      RankBreakdown b = ranks_[std::size_t(representative_[std::size_t(rank.rank)])].breakdown;
      b.idle_s = std::max(0.0, result.step_time_s - b.compute_s - b.exposed_comm_s - b.bubble_s);
      result.ranks.push_back(b);
    }
    result.simulated_ranks = int(std::count(simulated_.begin(), simulated_.end(), true));
    result.busiest_links = busiest_links(load_, device_bw_, node_bw_, result.step_time_s);
    result.events = std::move(events_);
    result.in_flight = std::move(memory_);
    result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    return result;
  }

 private:
  std::vector<std::vector<double>> layer_overhead_s_;  // per stage, per op: layer_overheads_s()
  std::vector<std::vector<double>> tp_overlap_s_;      // per stage, per op: tp_overlap_adjustments_s()

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
      platform_.intra_alpha_s = costs_.intra_latency_s();
      platform_.inter_alpha_s = std::max(costs_.inter_latency_s(), platform_.intra_alpha_s);
      platform_.device_bandwidth = costs_.intra_bandwidth_bytes_per_s();
      platform_.node_bandwidth = costs_.inter_bandwidth_per_device_bytes_per_s() * plan_.gpus_per_node();
    } else {
      platform_ = build_cluster_platform(plan_.cluster, costs_, program_.world_size(), plan_.gpus_per_node(),
                                         options_.contention_free);
    }
    hosts_ = platform_.hosts;
    intra_alpha_ = platform_.intra_alpha_s;
    inter_alpha_ = platform_.inter_alpha_s;
    device_bw_ = platform_.device_bandwidth;
    node_bw_ = platform_.node_bandwidth;
    load_.device_up.assign(hosts_.size(), 0);
    load_.device_down.assign(hosts_.size(), 0);
    load_.node_up.assign(std::size_t(platform_.nodes), 0);
    load_.node_down.assign(std::size_t(platform_.nodes), 0);
  }

  int node_of(int rank) const { return rank / plan_.gpus_per_node(); }

  // ---------------------------------------------------------------- groups
  std::vector<int> members(int rank, CommGroup group) const { return program_.layout().members(rank, group); }

  // ---------------------------------------------------------------- flows
  void flow_bytes(int from, int to, double bytes) {
    load_.device_up[from] += bytes;
    load_.device_down[to] += bytes;
    if (node_of(from) != node_of(to)) {
      load_.node_up[node_of(from)] += bytes;
      load_.node_down[node_of(to)] += bytes;
    }
  }

  // Concurrent flows; the extra latency steps of the algorithm first.
  void run_flows(const std::vector<std::pair<int, int>>& pairs, double bytes_each, double extra_latency_s) {
    if (pairs.empty()) return;
    if (extra_latency_s > 0) sg4::this_actor::sleep_for(extra_latency_s);
    if (bytes_each <= 0) return;
    std::vector<sg4::CommPtr> comms;
    for (auto [from, to] : pairs) {
      if (!simulated_[std::size_t(from)]) continue;  // a folded replica's flow: represented
      comms.push_back(sg4::Comm::sendto_async(hosts_[from], hosts_[to], std::uint64_t(std::llround(bytes_each))));
      flow_bytes(from, to, bytes_each);
      ++flows_;
    }
    sg4::Comm::wait_all(comms);
  }

  static std::vector<std::pair<int, int>> ring_pairs(const std::vector<int>& ring) {
    std::vector<std::pair<int, int>> pairs;
    if (ring.size() < 2) return pairs;
    for (std::size_t i = 0; i < ring.size(); ++i) pairs.emplace_back(ring[i], ring[(i + 1) % ring.size()]);
    return pairs;
  }

  // One level of a collective on rings that all progress at once.
  void ring_level(Collective op, const std::vector<std::vector<int>>& rings, double size, CollectiveAlgorithm algorithm,
                  double alpha) {
    std::vector<std::pair<int, int>> pairs;
    int n = 0;
    for (const auto& ring : rings) {
      n = int(ring.size());
      auto more = ring_pairs(ring);
      pairs.insert(pairs.end(), more.begin(), more.end());
    }
    if (n < 2) return;
    const int steps = collective_steps(op, n, algorithm);
    const double bytes = size * bus_bandwidth_factor(op, n);
    if (options_.aggregate || steps <= 1) {
      run_flows(pairs, bytes, (steps - 1) * alpha);
      return;
    }
    for (int step = 0; step < steps; ++step) run_flows(pairs, bytes / steps, 0);
  }

  void collective(const BlockOp& work, const std::vector<int>& group) {
    const int n = int(group.size());
    if (n < 2) return;
    const int gpn = plan_.gpus_per_node();
    // Members per node (groups tile nodes evenly or are spread one per node).
    std::map<int, std::vector<int>> by_node;
    for (int rank : group) by_node[rank / gpn].push_back(rank);
    const int nodes = int(by_node.size());
    const int k = n / nodes;
    const double alpha = nodes > 1 ? inter_alpha_ : intra_alpha_;
    for (int repeat = 0; repeat < int(std::lround(work.count)); ++repeat) {
      switch (work.collective) {
        case Collective::broadcast:
        case Collective::reduce: {
          // Pipelined chain: every hop carries the whole buffer at once.
          std::vector<std::pair<int, int>> chain;
          for (int i = 0; i + 1 < n; ++i) chain.emplace_back(group[i], group[i + 1]);
          run_flows(chain, work.bytes, (collective_steps(work.collective, n, work.algorithm) - 1) * alpha);
          break;
        }
        case Collective::send_recv:
          run_flows(ring_pairs(group), work.bytes, 0);
          break;
        case Collective::all_to_all: {
          // Every member sends 1/n of its buffer to every other member at once, so an ep
          // group that spans nodes loads the nodes' uplinks; n-1 latency steps.
          std::vector<std::pair<int, int>> pairs;
          for (int from : group) {
            for (int to : group) {
              if (from != to) pairs.emplace_back(from, to);
            }
          }
          run_flows(pairs, work.bytes / n, (collective_steps(work.collective, n, work.algorithm) - 1) * alpha);
          break;
        }
        default: {
          if (nodes == 1 || k == 1) {
            ring_level(work.collective, {group}, work.bytes, work.algorithm, alpha);
            break;
          }
          std::vector<std::vector<int>> intra;
          std::vector<std::vector<int>> inter(static_cast<std::size_t>(k));
          for (auto& [node, ranks] : by_node) {
            intra.push_back(ranks);
            for (int j = 0; j < k && j < int(ranks.size()); ++j) inter[std::size_t(j)].push_back(ranks[std::size_t(j)]);
          }
          const double size = work.bytes;
          switch (work.collective) {
            case Collective::all_reduce:
              ring_level(Collective::reduce_scatter, intra, size, work.algorithm, intra_alpha_);
              ring_level(Collective::all_reduce, inter, size / k, work.algorithm, inter_alpha_);
              ring_level(Collective::all_gather, intra, size, work.algorithm, intra_alpha_);
              break;
            case Collective::all_gather:
              ring_level(Collective::all_gather, inter, size / k, work.algorithm, inter_alpha_);
              ring_level(Collective::all_gather, intra, size, work.algorithm, intra_alpha_);
              break;
            case Collective::reduce_scatter:
              ring_level(Collective::reduce_scatter, intra, size, work.algorithm, intra_alpha_);
              ring_level(Collective::reduce_scatter, inter, size / k, work.algorithm, inter_alpha_);
              break;
            default:
              ring_level(work.collective, {group}, size, work.algorithm, inter_alpha_);
              break;
          }
        }
      }
      // The calibrated fixed cost of every call (profiles/calibration.hpp), as the planner adds it.
      const double call_overhead_s = costs_.calibration().collective_call_overhead_s;
      if (call_overhead_s > 0) sg4::this_actor::sleep_for(call_overhead_s);
    }
  }

  // Every member arrives; the last one runs the collective; all leave when it ends.
  Meeting& meeting_for(const std::string& key) {
    auto& slot = meetings_[key];
    if (!slot) {
      slot = std::make_unique<Meeting>();
      slot->mutex = sg4::Mutex::create();
      slot->changed = sg4::ConditionVariable::create();
    }
    return *slot;
  }

  void meet(const std::string& key, int expected, const std::function<void()>& body) {
    Meeting& meeting = meeting_for(key);
    std::unique_lock lock(*meeting.mutex);
    if (++meeting.arrived == expected) {
      lock.unlock();
      body();
      lock.lock();
      meeting.finished = true;
      meeting.changed->notify_all();
    } else {
      meeting.changed->wait(lock, [&] { return meeting.finished; });
    }
  }

  // ---------------------------------------------------------------- ops
  double compute_seconds(const ProgramOp& op) const {
    const BlockOp& work = op.work;
    const Precision precision = work.precision;  // the op's own: fp8 linears, bf16 attention under fp8
    switch (work.kind) {
      case OpKind::gemm: {
        // Routed experts run at the busiest rank's load, as the planner prices them.
        const double load = work.expert_load ? costs_.moe_load_factor(work.capacity_factor) : 1.0;
        return work.count * costs_.gemm_time_s(load * work.m, work.n, work.k, precision);
      }
      case OpKind::attention: return costs_.attention_time_s(work.flops, work.gemm_flops, precision);
      case OpKind::memory: {
        if (op.on_host) return costs_.host_memory_time_s(work.bytes);
        const double load = work.expert_load ? costs_.moe_load_factor(work.capacity_factor) : 1.0;
        return work.library_kernel ? costs_.library_memory_time_s(load * work.bytes)
                                   : costs_.memory_time_s(load * work.bytes);
      }
      default: return 0;
    }
  }

  // The rank a pipeline transfer leaves from, and a key both ends agree on.
  std::string transfer_key(const RankState& rank, const ProgramOp& op, int& source, int& destination) const {
    const RankLayout& layout = program_.layout();
    const int stages = layout.size(Axis::pp);
    const int offset = op.peer_offset;
    const int peer = layout.with(rank.rank, Axis::pp, (layout.stage_of(rank.rank) + offset + stages) % stages);
    const bool sending = op.work.kind == OpKind::send;
    source = sending ? rank.rank : peer;
    destination = sending ? peer : rank.rank;
    // "mb3/V2/fwd/pp.send" from V2 meets "mb3/V3/fwd/pp.recv" (offset -1): name the edge by its source.
    const auto v_at = op.id.find("/V") + 2;
    const int vs = std::stoi(op.id.substr(v_at));
    const int source_vs = sending ? vs : vs + offset;
    const auto pass_at = op.id.find('/', v_at);
    return fmt::format("{}/V{}{}>{}", op.id.substr(0, v_at - 2), source_vs, op.id.substr(pass_at, 5), source);
  }

  void execute(RankState& rank, std::uint32_t index) {
    const ProgramOp& op = rank.program->ops[index];
    switch (op.work.kind) {
      case OpKind::collective: {
        const std::vector<int> group = members(rank.rank, op.work.group);
        if (group.size() < 2) return;
        const int present = int(std::count_if(group.begin(), group.end(), [&](int r) { return simulated_[std::size_t(r)]; }));
        meet(fmt::format("{}@{}", op.id, group.front()), present, [&] { collective(op.work, group); });
        return;
      }
      case OpKind::send:
      case OpKind::recv: {
        // Eager transfer: the send moves the data as soon as it is posted (receives are
        // posted ahead in real runtimes), the receive waits for it to have arrived.
        int source = 0, destination = 0;
        const std::string key = transfer_key(rank, op, source, destination);
        Meeting& meeting = meeting_for(key);
        if (op.work.kind == OpKind::send) {
          run_flows({{source, destination}}, op.work.bytes, 0);
          const double call_overhead_s = costs_.calibration().collective_call_overhead_s;
          if (call_overhead_s > 0) sg4::this_actor::sleep_for(call_overhead_s);
          std::unique_lock lock(*meeting.mutex);
          meeting.finished = true;
          meeting.changed->notify_all();
        } else {
          std::unique_lock lock(*meeting.mutex);
          meeting.changed->wait(lock, [&] { return meeting.finished; });
        }
        return;
      }
      case OpKind::copy: {
        // Offload traffic on the device's own link to host memory.
        sg4::Host* device = hosts_[std::size_t(rank.rank)];
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
        sg4::this_actor::sleep_for(compute_seconds(op) + layer_overhead_s_[std::size_t(rank.program->stage)][index] +
                                   tp_overlap_s_[std::size_t(rank.program->stage)][index] +
                                   rank.contention.debt_paid_by_s(index));
        return;
    }
  }

  void run_stream(RankState& rank, const std::vector<std::uint32_t>& ops, bool compute_stream) {
    for (std::uint32_t index : ops) {
      const ProgramOp& op = rank.program->ops[index];
      const double ready_wait_start = sg4::Engine::get_clock();
      {
        std::unique_lock lock(*rank.mutex);
        rank.changed->wait(lock, [&] {
          return std::all_of(op.deps.begin(), op.deps.end(), [&](std::uint32_t d) { return rank.done_s[d] >= 0; });
        });
      }
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
      const auto mark = rank.contention.op_started(op, op.stream == Stream::compute && !is_communication(op), start);
      execute(rank, index);
      rank.contention.op_ended(mark);
      const double end = sg4::Engine::get_clock();
      if (op.stream == Stream::compute && !is_communication(op)) {
        rank.breakdown.compute_s += end - start;
      } else if (compute_stream) {
        // Only without overlap does the compute actor itself wait in communication.
        (op.work.kind == OpKind::recv ? rank.breakdown.bubble_s : rank.breakdown.exposed_comm_s) += end - start;
      }
      if (options_.record_trace) events_.push_back({rank.rank, op.stream, index, start, end});
      track_memory(rank, op, end);
      rank.last_end_s = std::max(rank.last_end_s, end);
      std::unique_lock lock(*rank.mutex);
      rank.done_s[index] = end;
      rank.changed->notify_all();
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

  static bool is_communication(const ProgramOp& op) {
    return op.work.kind == OpKind::collective || op.work.kind == OpKind::send || op.work.kind == OpKind::recv;
  }

  // Micro-batch chunks whose activations a stage holds: +1 when a chunk's forward
  // starts its first layer, -1 when its backward finishes the first layer.
  void track_memory(const RankState& rank, const ProgramOp& op, double time) {
    const ParallelConfig& p = plan_.parallel;
    const int stage = program_.layout().stage_of(rank.rank);
    if (rank.rank != program_.layout().first_rank_of_stage(stage)) return;  // one rank per stage
    static const std::string forward_norm = fmt::format("/{}/{}", ops::to_string(ops::Phase::fwd), ops::attn_norm);
    static const std::string backward_norm = fmt::format("/{}/{}", ops::to_string(ops::Phase::bwd), ops::attn_norm);
    const bool forward_start = op.id.find(forward_norm) != std::string::npos;
    const bool backward_end = op.id.find(backward_norm) != std::string::npos;
    if (!forward_start && !backward_end) return;
    const auto l_at = op.id.find("/L") + 2;
    const int layer = std::stoi(op.id.substr(l_at));
    const int chunks = p.pp * chunks_per_stage(p);
    if (virtual_stage_layers(plan_.model.layers, chunks, virtual_stage_of_layer(plan_.model.layers, chunks, layer)).first != layer) {
      return;
    }
    auto& samples = memory_[std::size_t(stage)];
    const int previous = samples.empty() ? 0 : samples.back().chunks;
    samples.push_back({time, previous + (forward_start ? 1 : -1)});
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
    for (int r = 0; r < world; ++r) {
      const int replica = program_.layout().coordinate(r, Axis::dp);
      simulated_[std::size_t(r)] = replica < kept;
      representative_[std::size_t(r)] = program_.layout().with(r, Axis::dp, replica % kept);
    }
  }

  // One actor per simulated rank, or per stream of it when streams overlap.
  std::size_t actor_count() const {
    std::size_t actors = 0;
    for (int r = 0; r < program_.world_size(); ++r) {
      if (!simulated_[std::size_t(r)]) continue;
      std::array<bool, 5> used{};
      for (const ProgramOp& op : program_.rank_program(r).ops) used[std::size_t(op.stream)] = true;
      actors += options_.overlap ? std::size_t(std::count(used.begin(), used.end(), true)) : 1;
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
      ops_total_ += rank.program->ops.size();
      rank.done_s.assign(rank.program->ops.size(), kNotDone);
      rank.mutex = sg4::Mutex::create();
      rank.changed = sg4::ConditionVariable::create();
      rank.contention = ComputeContention(costs_.calibration());
      for (std::uint32_t i = 0; i < rank.program->ops.size(); ++i) {
        const ProgramOp& op = rank.program->ops[i];
        const bool computes = op.stream == Stream::compute && !is_communication(op) && op.work.kind != OpKind::copy;
        if (computes) rank.contention.set_step_payer(i);  // the last one pays the step's contention
      }
      if (!options_.overlap) {
        streams_.push_back(sequential_order(*rank.program));
        const std::size_t slot = streams_.size() - 1;
        sg4::Actor::create(fmt::format("rank{}", r), hosts_[std::size_t(r)],
                           [this, &rank, slot] { run_stream(rank, streams_[slot], true); });
        continue;
      }
      std::array<std::vector<std::uint32_t>, 5> by_stream;
      for (std::uint32_t i = 0; i < rank.program->ops.size(); ++i) {
        by_stream[std::size_t(rank.program->ops[i].stream)].push_back(i);
      }
      for (std::size_t s = 0; s < by_stream.size(); ++s) {
        if (by_stream[s].empty()) continue;
        streams_.push_back(std::move(by_stream[s]));
        const std::size_t slot = streams_.size() - 1;
        const bool compute = s == std::size_t(Stream::compute);
        sg4::Actor::create(fmt::format("rank{}-{}", r, to_string(Stream(s))), hosts_[std::size_t(r)],
                           [this, &rank, slot, compute] { run_stream(rank, streams_[slot], compute); });
      }
    }
  }

  const Program& program_;
  const Plan& plan_;
  SimulationOptions options_;
  profiles::CostLookup costs_;
  std::vector<sg4::Host*> hosts_;
  std::vector<RankState> ranks_;
  std::vector<bool> simulated_;
  std::vector<int> representative_;
  std::vector<std::vector<std::uint32_t>> streams_;
  std::size_t ops_total_ = 0, ops_done_ = 0;  // for on_progress
  std::chrono::steady_clock::time_point last_progress_ = std::chrono::steady_clock::now();
  std::map<std::string, std::unique_ptr<Meeting>> meetings_;
  std::vector<TraceEvent> events_;
  std::vector<std::vector<InFlightSample>> memory_;
  LinkLoad load_;
  ClusterPlatform platform_;
  double intra_alpha_ = 0, inter_alpha_ = 0, device_bw_ = 0, node_bw_ = 0;
  std::size_t flows_ = 0;
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
