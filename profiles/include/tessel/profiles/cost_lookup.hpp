// The one place cost numbers are read: GEMM, memory-bound, host and collective times for one
// device on one cluster, from a Profile and the cluster spec's fabric figures. Planner and
// simulator both ask it and hold no cost constant of their own. How each time is derived (GEMM
// curves, streaming rates, hierarchical alpha-beta collectives, ranks sharing cores):
// docs/CALIBRATION.md, "Profiles", and docs/COST_MODEL.md, "Collectives".
#pragma once

#include <algorithm>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/cluster_spec.hpp"
#include "tessel/core/device_spec.hpp"
#include "tessel/profiles/calibration.hpp"
#include "tessel/profiles/collectives.hpp"
#include "tessel/profiles/link_fit.hpp"
#include "tessel/profiles/prediction_bounds.hpp"
#include "tessel/profiles/profile.hpp"

namespace tessel::profiles {

// Where a communicating group sits: `ranks` in all, `ranks_per_node` of them per node.
struct GroupPlacement {
  int ranks = 1;
  int ranks_per_node = 1;
  int nodes() const { return ranks / ranks_per_node; }
};

// Placement of a group of `size` ranks whose members are `stride` ranks apart.
GroupPlacement place_group(int size, int stride, int gpus_per_node);

// Which approximations a lookup had to make; reported with every prediction.
enum CostFlag : unsigned {
  kGemmExtrapolated = 1u << 0,  // a GEMM size outside the sampled range
  kGemmRoofline = 1u << 1,      // no GEMM sample for a precision: roofline at peak
  kCoresShared = 1u << 2,       // more ranks on a node than the CPU profile's cores
  kCoresUnstated = 1u << 3,     // a CPU profile without cores, several ranks: one core each assumed
};
std::vector<std::string> describe_cost_flags(unsigned flags);

class CostLookup {
 public:
  CostLookup(const Profile& profile, ClusterSpec cluster, int nodes, int gpus_per_node);
  CostLookup(const CostLookup& other);

  const DeviceSpec& device() const { return device_; }
  const ClusterSpec& cluster() const { return cluster_; }
  int gpus_per_node() const { return gpus_per_node_; }
  // Ranks per core on a node (>= 1): what every rank's time is multiplied by when the
  // ranks outnumber a CPU profile's cores; 1 otherwise.
  double core_sharing() const { return core_sharing_; }

  // The calibration prices are read with: the profile's (defaults when it has none) for
  // the plan's framework and kernels (Calibration::for_plan). A fit replaces it to price
  // the same runs under new parameters without rebuilding the lookup.
  const Calibration& calibration() const { return calibration_; }
  // Returns whether the rates this lookup prices with moved (its efficiency scales, bus
  // efficiencies and call overhead): what it prices is the same otherwise.
  bool set_calibration(const Calibration& calibration) {
    const Calibration before = calibration_;
    fitted_ = calibration;
    calibration_ = fitted_.for_plan(framework_, kernels_);
    return before.gemm_efficiency_scale != calibration_.gemm_efficiency_scale ||
           before.memory_efficiency_scale != calibration_.memory_efficiency_scale ||
           before.attention_efficiency_scale != calibration_.attention_efficiency_scale ||
           before.intra_bus_efficiency != calibration_.intra_bus_efficiency ||
           before.inter_bus_efficiency != calibration_.inter_bus_efficiency ||
           before.collective_call_overhead_s != calibration_.collective_call_overhead_s;
  }
  void set_plan_kind(Framework framework, Kernels kernels) {
    framework_ = framework;
    kernels_ = kernels;
    calibration_ = fitted_.for_plan(framework_, kernels_);
  }
  // "profile: H100-SXM calibrated on 83 published runs" when the profile is a calibrated
  // one, else empty: the line predictions print so that a reader knows.
  const std::string& calibration_note() const { return calibration_note_; }
  // The profile's error band and measured experience (prediction_bounds.hpp).
  const PredictionBounds& prediction_bounds() const { return *prediction_bounds_; }

  // Seconds of one GEMM of `gemm_flops` (2mnk) in `precision`.
  double gemm_seconds(double gemm_flops, Precision precision) const;
  // Achievable fraction of peak at that size.
  double gemm_efficiency(double gemm_flops, Precision precision) const;
  // Time of `total_flops` done as GEMMs of `gemm_flops` each.
  double gemm_time_s(double total_flops, double gemm_flops, Precision precision) const;
  double gemm_time_s(double m, double n, double k, Precision precision) const;
  // Attention's score and context products, `total_flops` as batched GEMMs of
  // `gemm_flops` each: the GEMM curve divided by the calibrated attention efficiency
  // (instead of the GEMM one: fused attention kernels are not GEMMs).
  double attention_time_s(double total_flops, double gemm_flops, Precision precision) const;
  // Streaming `bytes` through device memory.
  double memory_time_s(double bytes) const;
  // The same for a kernel of the fp8 library (BlockOp::library_kernel): the profile's
  // memory rate, without the calibrated memory scale of the framework's own ops.
  double library_memory_time_s(double bytes) const;
  // What routed-expert work on the busiest rank costs over the mean: the device's MoE
  // load imbalance, capped by the capacity factor (tokens past it are dropped) when > 0.
  double moe_load_factor(double capacity_factor) const {
    return capacity_factor > 0 ? std::min(device_.moe_load_imbalance, capacity_factor) : device_.moe_load_imbalance;
  }
  // Streaming `bytes` through host memory, with the host shared by the node's devices.
  double host_memory_time_s(double bytes) const;
  // Host<->device copies of `bytes` on one device's link.
  double host_device_time_s(double bytes) const;
  // A collective of `size_bytes` (nccl-tests size) on `group`: its alpha-beta time plus
  // the calibrated collective call overhead.
  double collective_time_s(Collective op, GroupPlacement group, double size_bytes,
                           CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring) const;

  double intra_bandwidth_bytes_per_s() const { return intra_bw_; }
  double inter_bandwidth_per_device_bytes_per_s() const { return inter_bw_; }
  double memory_bandwidth_bytes_per_s() const { return memory_bw_; }
  double intra_latency_s() const { return intra_latency_s_; }
  double inter_latency_s() const { return inter_latency_s_; }
  bool intra_from_samples() const { return intra_measured_; }
  bool inter_from_samples() const { return inter_measured_; }

  // Flags raised by lookups so far (CostFlag bits).
  unsigned flags() const { return flags_.load(std::memory_order_relaxed); }

 private:
  struct Curve {
    std::vector<double> log_flops, log_seconds;
    double peak = 0;
  };
  const Curve& curve(Precision precision) const;
  // Divides every rate by ranks / cores when a CPU node holds more ranks than cores.
  void share_cores();
  // Seconds of one GEMM by the profile's curve, before calibration.
  double curve_seconds(double gemm_flops, Precision precision) const;
  using OpFits = std::array<std::optional<LinkFit>, 7>;  // by Collective
  double alpha_beta_time_s(Collective op, GroupPlacement group, double size_bytes,
                           CollectiveAlgorithm algorithm) const;
  double level_time_s(Collective op, int ranks, double size_bytes, double bandwidth, double latency_s,
                      const OpFits& fits, double latency_scale, double bus_efficiency,
                      CollectiveAlgorithm algorithm) const;

  DeviceSpec device_;
  ClusterSpec cluster_;
  int gpus_per_node_;
  double core_sharing_ = 1;
  Calibration fitted_;       // as the profile or the fit holds it
  Framework framework_ = Framework::pytorch;
  Kernels kernels_ = Kernels::unfused;
  Calibration calibration_;  // fitted_ for framework_ and kernels_
  std::string calibration_note_;
  std::shared_ptr<const PredictionBounds> prediction_bounds_;  // shared: lookups are copied per search thread
  Curve curves_[4];  // by Precision (fp8: the linears of fp8 training; none where the device has no fp8)
  double memory_bw_;
  bool intra_measured_ = false, inter_measured_ = false;
  mutable std::atomic<unsigned> flags_{0};
  // Search threads share one lookup: read before writing, so that a flag already raised
  // costs no cache-line write on every GEMM that is out of the sampled range.
  void raise(unsigned flag) const {
    if ((flags_.load(std::memory_order_relaxed) & flag) == 0) flags_.fetch_or(flag, std::memory_order_relaxed);
  }
  double host_bw_per_device_;
  double intra_bw_, intra_latency_s_;
  double inter_bw_, inter_latency_s_;
  OpFits intra_fits_{}, inter_fits_{};
  double inter_hops_ = 1;
};

}  // namespace tessel::profiles
