#include "tessel/core/cluster_spec.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/presets.hpp"

namespace tessel {

ClusterSpec ClusterSpec::from_json(const Json& json, const std::string& path) {
  JsonFields f(json, path);
  ClusterSpec c;
  c.name = f.string_or("name", "custom");
  if (const Json* per_node = f.get("gpus_per_node"); per_node && per_node->is_string()) {
    if (per_node->get<std::string>() != "world") {
      f.fail("gpus_per_node", fmt::format("must be a positive integer or \"world\", got {}", per_node->dump()));
    }
    c.gpus_per_node = 0;
  } else {
    c.gpus_per_node = int(f.positive_int("gpus_per_node", limits::kMaxGpus));
  }
  c.max_nodes = int(f.positive_int_or("max_nodes", 0, limits::kMaxGpus));
  c.device = f.string("device");
  {
    const Json* intra = f.get("intra_node");
    if (intra == nullptr) f.fail("intra_node", "missing (required)");
    JsonFields i(*intra, f.field_path("intra_node"));
    c.intra_node.kind = i.choice_or("kind", {"nvswitch", "pcie", "shared-memory"}, "nvswitch");
    c.intra_node.bandwidth_bytes_per_s = i.positive_number("bandwidth_bytes_per_s");
    c.intra_node.latency_s = i.positive_number("latency_s");
    c.intra_node.efficiency = i.fraction_or("efficiency", 1.0);
    i.finish();
  }
  if (const Json* inter = f.get("inter_node")) {
    JsonFields i(*inter, f.field_path("inter_node"));
    InterNodeFabric n;
    n.nics_per_node = int(i.positive_int("nics_per_node"));
    n.bandwidth_per_nic_bytes_per_s = i.positive_number("bandwidth_per_nic_bytes_per_s");
    n.latency_s = i.positive_number("latency_s");
    n.efficiency = i.fraction_or("efficiency", 1.0);
    n.topology = *enum_from_string<Topology>(i.choice_or("topology", {"fat-tree", "torus", "dragonfly"}, "fat-tree"));
    n.oversubscription = i.positive_number_or("oversubscription", 1.0);
    if (n.oversubscription < 1) i.fail("oversubscription", fmt::format("must be >= 1, got {}", n.oversubscription));
    n.torus_dimensions = int(i.int_in_range("torus_dimensions", 1, 6, 3));
    n.dragonfly_group_nodes = int(i.positive_int_or("dragonfly_group_nodes", 32));
    i.finish();
    c.inter_node = n;
  } else if (c.max_nodes != 1) {
    f.fail("inter_node", "missing (required unless max_nodes is 1)");
  }
  c.host_memory_bytes = f.positive_number("host_memory_bytes");
  c.host_memory_bandwidth_bytes_per_s = f.positive_number("host_memory_bandwidth_bytes_per_s");
  c.host_device_bandwidth_bytes_per_s = f.positive_number("host_device_bandwidth_bytes_per_s");
  if (const Json* sources = f.get("sources")) c.sources = *sources;
  f.finish();
  return c;
}

Json ClusterSpec::to_json() const {
  Json out{{"name", name},
           {"gpus_per_node", gpus_per_node == 0 ? Json("world") : Json(gpus_per_node)},
           {"device", device},
           {"intra_node",
            {{"kind", intra_node.kind},
             {"bandwidth_bytes_per_s", intra_node.bandwidth_bytes_per_s},
             {"latency_s", intra_node.latency_s},
             {"efficiency", intra_node.efficiency}}},
           {"host_memory_bytes", host_memory_bytes},
           {"host_memory_bandwidth_bytes_per_s", host_memory_bandwidth_bytes_per_s},
           {"host_device_bandwidth_bytes_per_s", host_device_bandwidth_bytes_per_s}};
  if (max_nodes != 0) out["max_nodes"] = max_nodes;
  if (inter_node) {
    out["inter_node"] = {{"nics_per_node", inter_node->nics_per_node},
                         {"bandwidth_per_nic_bytes_per_s", inter_node->bandwidth_per_nic_bytes_per_s},
                         {"latency_s", inter_node->latency_s},
                         {"efficiency", inter_node->efficiency},
                         {"topology", to_string(inter_node->topology)},
                         {"oversubscription", inter_node->oversubscription},
                         {"torus_dimensions", inter_node->torus_dimensions},
                         {"dragonfly_group_nodes", inter_node->dragonfly_group_nodes}};
  }
  if (!sources.is_null()) out["sources"] = sources;
  return out;
}

ClusterSpec resolve_cluster(const std::string& preset_or_file) {
  return ClusterSpec::from_json(load_preset_or_file("clusters", preset_or_file, "cluster"),
                                fmt::format("cluster ({})", preset_or_file));
}

ClusterSpec cluster_from_json_value(const Json& value, const std::string& path) {
  if (value.is_string()) return resolve_cluster(value.get<std::string>());
  return ClusterSpec::from_json(value, path);
}

}  // namespace tessel
