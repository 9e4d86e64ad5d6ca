// See platform.hpp.
#include "platform.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>
#include <xbt/config.hpp>

#include "tessel/core/error.hpp"
#include "tessel/core/process_memory.hpp"

namespace tessel::simulator {

namespace sg4 = simgrid::s4u;

std::vector<unsigned long> torus_sides(int nodes, int dimensions) {
  std::vector<unsigned long> sides(std::size_t(std::max(dimensions, 1)), 1);
  std::vector<int> primes;
  for (int n = nodes, f = 2; n > 1; f = f * f > n ? n : f + 1) {
    while (n % f == 0) primes.push_back(f), n /= f;
  }
  std::sort(primes.rbegin(), primes.rend());
  for (int prime : primes) *std::min_element(sides.begin(), sides.end()) *= std::size_t(prime);
  return sides;
}

// Each node reaches the others through one uplink with the node's NIC bandwidth (already
// divided by oversubscription in the lookup). Links carry the profile's bandwidths times
// the calibrated bus efficiencies (profiles/calibration.hpp), as the planner's
// collective times divide by them: the two models must price one profile alike.
ClusterPlatform build_cluster_platform(const ClusterSpec& cluster, const profiles::CostLookup& costs, int world,
                                       int gpn, bool contention_free, int devices_per_simulated,
                                       const std::vector<bool>& nodes_in_use) {
  ClusterPlatform out;
  out.nodes = std::max(1, (world + gpn - 1) / gpn);
  out.intra_alpha_s = costs.intra_latency_s();
  out.inter_alpha_s = std::max(costs.inter_latency_s(), out.intra_alpha_s);
  const profiles::Calibration& calibration = costs.calibration();
  out.device_bandwidth = costs.intra_bandwidth_bytes_per_s() * calibration.intra_bus_efficiency;
  // The node's uplink carries every device's share; without contention no flow may use
  // more than one device's share.
  out.node_bandwidth = costs.inter_bandwidth_per_device_bytes_per_s() * calibration.inter_bus_efficiency *
                       (contention_free ? 1.0 : double(gpn) / double(std::max(devices_per_simulated, 1)));
  auto policy = [&](sg4::SplitDuplexLink* link) {
    if (contention_free) {
      link->get_link_up()->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE);
      link->get_link_down()->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE);
    }
    return link;
  };
  out.hosts.resize(std::size_t(world), nullptr);
  out.node_memory.resize(std::size_t(out.nodes), nullptr);
  const bool pcie_tree = cluster.intra_node.kind == "pcie";
  // One node: a star of per-device links around the NVSwitch (or shared memory; with a
  // PCIe fabric every two devices also share a switch link), the host's memory, each
  // device's own PCIe link to it (for offload copies), and a router through which the
  // node talks to the others.
  auto make_node = [&](const sg4::NetZone* parent, int n) {
    ++out.built_nodes;
    auto* node = sg4::create_star_zone(fmt::format("node{}", n));
    node->set_parent(parent);
    sg4::Host* memory = node->create_host(fmt::format("host{}", n), 1e9)->seal();
    auto* memory_link = node->create_split_duplex_link(fmt::format("host-memory{}", n),
                                                       cluster.host_memory_bandwidth_bytes_per_s);
    memory_link->set_latency(0)->seal();
    node->add_route(memory->get_netpoint(), nullptr, nullptr, nullptr,
                    {{memory_link, sg4::LinkInRoute::Direction::UP}}, true);
    out.node_memory[std::size_t(n)] = memory;
    sg4::SplitDuplexLink* pcie_switch = nullptr;
    for (int g = 0; g < gpn && n * gpn + g < world; ++g) {
      const int rank = n * gpn + g;
      sg4::Host* host = node->create_host(fmt::format("rank{}", rank), 1e9)->seal();
      auto* link = policy(node->create_split_duplex_link(fmt::format("device{}", rank), out.device_bandwidth));
      link->set_latency(out.intra_alpha_s / 2)->seal();
      std::vector<sg4::LinkInRoute> route{{link, sg4::LinkInRoute::Direction::UP}};
      if (pcie_tree) {
        if (g % 2 == 0) {
          pcie_switch = policy(node->create_split_duplex_link(fmt::format("pcie-switch{}-{}", n, g / 2),
                                                              out.device_bandwidth));
          pcie_switch->set_latency(0)->seal();
        }
        route.emplace_back(pcie_switch, sg4::LinkInRoute::Direction::UP);
      }
      node->add_route(host->get_netpoint(), nullptr, nullptr, nullptr, route, true);
      auto* to_host = node->create_split_duplex_link(fmt::format("host-link{}", rank),
                                                     cluster.host_device_bandwidth_bytes_per_s);
      to_host->set_latency(0)->seal();
      node->add_bypass_route(host->get_netpoint(), memory->get_netpoint(), nullptr, nullptr,
                             {{to_host, sg4::LinkInRoute::Direction::UP}});
      node->add_bypass_route(memory->get_netpoint(), host->get_netpoint(), nullptr, nullptr,
                             {{to_host, sg4::LinkInRoute::Direction::DOWN}});
      out.hosts[std::size_t(rank)] = host;
    }
    auto* gateway = node->create_router(fmt::format("gateway{}", n));
    node->seal();
    return std::pair{node->get_netpoint(), gateway};
  };
  const Topology topology = cluster.inter_node && out.nodes > 1 ? cluster.inter_node->topology : Topology::fat_tree;
  if (topology == Topology::fat_tree) {
    // Non-blocking core; each node's uplink carries its NICs' bandwidth divided by the
    // oversubscription of the leaf switches.
    auto* root = sg4::create_star_zone("cluster");
    for (int n = 0; n < out.nodes; ++n) {
      if (!nodes_in_use.empty() && !nodes_in_use[std::size_t(n)]) continue;
      auto [netpoint, gateway] = make_node(root, n);
      auto* uplink = policy(root->create_split_duplex_link(fmt::format("uplink{}", n), out.node_bandwidth));
      uplink->set_latency((out.inter_alpha_s - out.intra_alpha_s) / 2)->seal();
      root->add_route(netpoint, nullptr, gateway, nullptr, {{uplink, sg4::LinkInRoute::Direction::UP}}, true);
    }
    root->seal();
    return out;
  }
  // Torus and dragonfly: SimGrid's cluster zones with the nodes as leaves; each link
  // carries a node's NIC bandwidth spread over its links, a hop costs the spec's latency.
  const InterNodeFabric& inter = *cluster.inter_node;
  const double node_injection =
      inter.nics_per_node * inter.bandwidth_per_nic_bytes_per_s * inter.efficiency * calibration.inter_bus_efficiency;
  const double hop_latency = std::max(0.0, inter.latency_s - out.intra_alpha_s);
  const auto sharing = contention_free ? sg4::Link::SharingPolicy::FATPIPE : sg4::Link::SharingPolicy::SPLITDUPLEX;
  auto leaf = [&](sg4::NetZone* zone, const std::vector<unsigned long>&, unsigned long id)
      -> std::pair<simgrid::kernel::routing::NetPoint*, simgrid::kernel::routing::NetPoint*> {
    if (int(id) < out.nodes) return make_node(zone, int(id));
    // Leaves beyond the node count hold no device.
    auto* empty = sg4::create_star_zone(fmt::format("empty{}", id));
    empty->set_parent(zone);
    auto* router = empty->create_router(fmt::format("empty-router{}", id));
    empty->seal();
    return {empty->get_netpoint(), router};
  };
  sg4::NetZone* fabric = nullptr;
  if (topology == Topology::torus) {
    const auto sides = torus_sides(out.nodes, inter.torus_dimensions);
    fabric = sg4::create_torus_zone("cluster", nullptr, sides, sg4::ClusterCallbacks(leaf),
                                    node_injection / (2.0 * double(sides.size())), hop_latency, sharing);
  } else {
    const unsigned group_nodes = unsigned(std::clamp(inter.dragonfly_group_nodes, 1, out.nodes));
    const unsigned groups = unsigned((out.nodes + int(group_nodes) - 1) / int(group_nodes));
    fabric = sg4::create_dragonfly_zone("cluster", nullptr,
                                        sg4::DragonflyParams({groups, 1}, {1, 1}, {group_nodes, 1}, 1),
                                        sg4::ClusterCallbacks(leaf), node_injection, hop_latency, sharing);
  }
  fabric->seal();
  TESSEL_ASSERT(out.built_nodes == out.nodes, "every node must be a leaf of the fabric");
  return out;
}

std::unique_ptr<sg4::Engine> make_engine() {
  static std::vector<std::string> args{"tessel-simulate", "--log=root.thres:critical", "--cfg=network/model:CM02",
                                       "--cfg=network/crosstraffic:0", "--cfg=network/TCP-gamma:0",
                                       "--cfg=network/optim:Full", "--cfg=network/maxmin-selective-update:yes"};
  static std::vector<char*> argv;
  argv.clear();
  for (auto& arg : args) argv.push_back(arg.data());
  int argc = int(argv.size());
  return std::make_unique<sg4::Engine>(&argc, argv.data());
}

std::vector<LinkUse> busiest_links(const LinkLoad& load, double device_bandwidth, double node_bandwidth, double step_s) {
  std::vector<LinkUse> uses;
  const double step = std::max(step_s, 1e-12);
  auto add = [&](const std::string& name, double bytes, double bandwidth) {
    if (bytes > 0) uses.push_back({name, bytes / (bandwidth * step), bytes});
  };
  for (std::size_t r = 0; r < load.device_up.size(); ++r) {
    add(fmt::format("device{}/up", r), load.device_up[r], device_bandwidth);
    add(fmt::format("device{}/down", r), load.device_down[r], device_bandwidth);
  }
  for (std::size_t n = 0; n < load.node_up.size(); ++n) {
    add(fmt::format("uplink{}/up", n), load.node_up[n], node_bandwidth);
    add(fmt::format("uplink{}/down", n), load.node_down[n], node_bandwidth);
  }
  std::sort(uses.begin(), uses.end(), [](const LinkUse& a, const LinkUse& b) {
    return a.busy_fraction != b.busy_fraction ? a.busy_fraction > b.busy_fraction : a.name < b.name;
  });
  if (uses.size() > 10) uses.resize(10);
  return uses;
}

void refuse_actor_stacks_beyond_address_space(std::size_t actors) {
  const double left_bytes = address_space_left_bytes();
  if (left_bytes < 0) return;  // no limit: the kernel maps stacks lazily
  // A stack and its guard page; the rest of the replay needs room too, so half is the most
  // the stacks may take.
  const double stack_bytes = double(simgrid::config::get_value<int>("contexts/stack-size")) * 1024.0 +
                             double(sysconf(_SC_PAGE_SIZE));
  if (double(actors) * stack_bytes > 0.5 * left_bytes) {
    throw Error(fmt::format("simulate: {} simulated streams need {:.2f} GiB of SimGrid stacks ({:.0f} KiB each), more "
                            "than half of the {:.2f} GiB this process may still map (ulimit -v); raise the limit or "
                            "simulate fewer ranks",
                            actors, double(actors) * stack_bytes / double(1ULL << 30), stack_bytes / 1024.0,
                            left_bytes / double(1ULL << 30)));
  }
}

}  // namespace tessel::simulator
