// See flows.hpp. Ring collectives run as concurrent neighbour flows carrying the ring's
// traffic, per level for groups that span nodes (intra-node reduce-scatter, inter-node
// all-reduce on each rail, intra-node all-gather); broadcasts as a pipelined chain.
#include "flows.hpp"

#include <cmath>
#include <map>

#include "tessel/core/error.hpp"
#include "tessel/profiles/collectives.hpp"

namespace tessel::simulator {

namespace sg4 = simgrid::s4u;
using profiles::bus_bandwidth_factor;
using profiles::collective_steps;

namespace {
std::vector<std::pair<int, int>> ring_pairs(const std::vector<int>& ring) {
  std::vector<std::pair<int, int>> pairs;
  if (ring.size() < 2) return pairs;
  for (std::size_t i = 0; i < ring.size(); ++i) pairs.emplace_back(ring[i], ring[(i + 1) % ring.size()]);
  return pairs;
}
}  // namespace

void FlowNetwork::run_flows(const std::vector<std::pair<int, int>>& pairs, double bytes_each, double extra_latency_s) {
  if (pairs.empty()) return;
  if (extra_latency_s > 0) sg4::this_actor::sleep_for(extra_latency_s);
  if (bytes_each <= 0) return;
  std::vector<sg4::CommPtr> comms;
  comms.reserve(pairs.size());
  const auto bytes = std::uint64_t(std::llround(bytes_each));
  for (auto [from, peer] : pairs) {
    if (!simulated_[std::size_t(from)]) continue;  // a folded replica's flow: represented
    const int to = receiver_[std::size_t(peer)];
    TESSEL_ASSERT(platform_.hosts[std::size_t(from)] && platform_.hosts[std::size_t(to)],
                  "a flow's nodes must have been marked as reached when the platform was built");
    comms.push_back(sg4::Comm::sendto_async(platform_.hosts[std::size_t(from)], platform_.hosts[std::size_t(to)], bytes));
    load_.device_up[std::size_t(from)] += bytes_each;
    load_.device_down[std::size_t(to)] += bytes_each;
    if (node_of(from) != node_of(to)) {
      load_.node_up[std::size_t(node_of(from))] += bytes_each;
      load_.node_down[std::size_t(node_of(to))] += bytes_each;
    }
    ++flows_;
  }
  sg4::Comm::wait_all(comms);
}

FlowNetwork::Level FlowNetwork::ring_level(Collective op, const std::vector<std::vector<int>>& rings,
                                           CollectiveAlgorithm algorithm, double size_factor, double alpha) const {
  Level level;
  int n = 0;
  for (const auto& ring : rings) {
    n = int(ring.size());
    auto more = ring_pairs(ring);
    level.pairs.insert(level.pairs.end(), more.begin(), more.end());
  }
  if (n < 2) {
    level.pairs.clear();
    return level;
  }
  level.steps = collective_steps(op, n, algorithm);
  level.bytes_factor = size_factor * bus_bandwidth_factor(op, n);
  level.extra_latency_s = (level.steps - 1) * alpha;
  return level;
}

FlowNetwork::Levels FlowNetwork::make_levels(const BlockOp& work, const std::vector<int>& group) const {
  const int n = int(group.size());
  // Members per node (groups tile nodes evenly or are spread one per node).
  std::map<int, std::vector<int>> by_node;
  for (int rank : group) by_node[node_of(rank)].push_back(rank);
  const int nodes = int(by_node.size());
  const int k = n / nodes;
  const double alpha = nodes > 1 ? platform_.inter_alpha_s : platform_.intra_alpha_s;
  const double intra_alpha = platform_.intra_alpha_s, inter_alpha = platform_.inter_alpha_s;
  const int steps = collective_steps(work.collective, n, work.algorithm);
  switch (work.collective) {
    case Collective::broadcast:
    case Collective::reduce: {
      // Pipelined chain: every hop carries the whole buffer at once.
      Level chain;
      for (int i = 0; i + 1 < n; ++i) chain.pairs.emplace_back(group[std::size_t(i)], group[std::size_t(i + 1)]);
      chain.extra_latency_s = (steps - 1) * alpha;
      return {chain};
    }
    case Collective::send_recv: return {Level{ring_pairs(group), 1, 0, 1}};
    case Collective::all_to_all: {
      // Pairwise exchange: in round k every member sends 1/n of its buffer to the member k
      // places on, so each member's link carries one transfer at a time (also on links
      // that never share), and an ep group that spans nodes loads the nodes' uplinks;
      // n-1 rounds, one latency each.
      Levels rounds;
      for (int k = 1; k < n; ++k) {
        Level round;
        for (int i = 0; i < n; ++i) round.pairs.emplace_back(group[std::size_t(i)], group[std::size_t((i + k) % n)]);
        round.bytes_factor = 1.0 / n;
        rounds.push_back(std::move(round));
      }
      return rounds;
    }
    default: break;
  }
  if (nodes == 1 || k == 1) return {ring_level(work.collective, {group}, work.algorithm, 1, alpha)};
  std::vector<std::vector<int>> intra;
  std::vector<std::vector<int>> inter(static_cast<std::size_t>(k));
  for (auto& [node, ranks] : by_node) {
    intra.push_back(ranks);
    for (int j = 0; j < k && j < int(ranks.size()); ++j) inter[std::size_t(j)].push_back(ranks[std::size_t(j)]);
  }
  const double rail = 1.0 / k;
  switch (work.collective) {
    case Collective::all_reduce:
      return {ring_level(Collective::reduce_scatter, intra, work.algorithm, 1, intra_alpha),
              ring_level(Collective::all_reduce, inter, work.algorithm, rail, inter_alpha),
              ring_level(Collective::all_gather, intra, work.algorithm, 1, intra_alpha)};
    case Collective::all_gather:
      return {ring_level(Collective::all_gather, inter, work.algorithm, rail, inter_alpha),
              ring_level(Collective::all_gather, intra, work.algorithm, 1, intra_alpha)};
    case Collective::reduce_scatter:
      return {ring_level(Collective::reduce_scatter, intra, work.algorithm, 1, intra_alpha),
              ring_level(Collective::reduce_scatter, inter, work.algorithm, rail, inter_alpha)};
    default: return {ring_level(work.collective, {group}, work.algorithm, 1, inter_alpha)};
  }
}

void FlowNetwork::mark_transfer_nodes(int from, int to, std::vector<bool>& nodes) const {
  if (!simulated_[std::size_t(from)]) return;
  nodes[std::size_t(node_of(from))] = true;
  nodes[std::size_t(node_of(receiver_[std::size_t(to)]))] = true;
}

void FlowNetwork::mark_nodes_reached(const BlockOp& work, const std::vector<int>& group,
                                     std::vector<bool>& nodes) const {
  if (group.size() < 2) return;
  for (const Level& level : make_levels(work, group)) {
    for (auto [from, peer] : level.pairs) mark_transfer_nodes(from, peer, nodes);
  }
}

const FlowNetwork::Levels& FlowNetwork::levels_of(const BlockOp& work, const std::vector<int>& group) {
  // A group is named by its kind and first member; its cut by the collective and algorithm.
  const std::uint64_t key = ((std::uint64_t(group.front()) * 16 + std::uint64_t(work.group)) * 16 +
                             std::uint64_t(work.collective)) * 4 + std::uint64_t(work.algorithm);
  auto it = levels_.find(key);
  if (it == levels_.end()) it = levels_.emplace(key, make_levels(work, group)).first;
  return it->second;
}

void FlowNetwork::collective(const BlockOp& work, const std::vector<int>& group) {
  if (group.size() < 2) return;
  const Levels& levels = levels_of(work, group);
  for (int repeat = 0; repeat < int(std::lround(work.count)); ++repeat) {
    for (const Level& level : levels) {
      const double bytes = work.bytes * level.bytes_factor;
      if (aggregate_ || level.steps <= 1) {
        run_flows(level.pairs, bytes, level.extra_latency_s);
      } else {
        for (int step = 0; step < level.steps; ++step) run_flows(level.pairs, bytes / level.steps, 0);
      }
    }
    // The calibrated fixed cost of every call (profiles/calibration.hpp), as the planner adds it.
    if (call_overhead_s_ > 0) sg4::this_actor::sleep_for(call_overhead_s_);
  }
}

}  // namespace tessel::simulator
