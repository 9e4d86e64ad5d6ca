#include "tessel/profiles/cost_lookup.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/profiles/link_fit.hpp"

namespace tessel::profiles {

GroupPlacement place_group(int size, int stride, int gpus_per_node) {
  if (size <= 1) return {1, 1};
  const int per_node = std::clamp(gpus_per_node / std::max(stride, 1), 1, size);
  // Members per node must tile the group; otherwise treat every member as remote.
  return size % per_node == 0 ? GroupPlacement{size, per_node} : GroupPlacement{size, 1};
}

std::vector<std::string> describe_cost_flags(unsigned flags) {
  std::vector<std::string> out;
  if (flags & kGemmExtrapolated) out.emplace_back("GEMM sizes outside the profile's sampled range were extrapolated");
  if (flags & kGemmRoofline) out.emplace_back("no GEMM samples for the precision: roofline at peak was used");
  if (flags & kCoresShared) {
    out.emplace_back("more ranks than the profile's cores: ranks take turns, each priced at cores/ranks of a core");
  }
  if (flags & kCoresUnstated) {
    out.emplace_back("the CPU profile states no core count: each rank priced as if it had a core of its own "
                     "(re-run tessel profile --backend cpu)");
  }
  return out;
}

namespace {
double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::optional<Precision> training_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  if (name == "fp8") return Precision::fp8;
  return std::nullopt;  // tf32 samples serve no training precision yet
}
}  // namespace

CostLookup::CostLookup(const Profile& profile, ClusterSpec cluster, int nodes, int gpus_per_node)
    : device_(profile.device),
      cluster_(std::move(cluster)),
      gpus_per_node_(gpus_per_node),
      fitted_(calibration_of(profile)),
      calibration_(fitted_.for_plan(framework_, kernels_)),
      calibration_note_(is_calibrated(profile) ? describe_profile(profile) : std::string()),
      prediction_bounds_(std::make_shared<const PredictionBounds>(prediction_bounds_of(profile))) {
  // GEMM curves: group samples by precision and size, median per size, sorted.
  const bool cpu = device_.kind == "cpu";
  for (Precision precision : {Precision::fp32, Precision::bf16, Precision::fp16, Precision::fp8}) {
    Curve& c = curves_[int(precision)];
    c.peak = device_.peak_flops_per_s(precision);
    std::vector<std::pair<double, double>> points;  // (flops, seconds)
    for (const KernelSample& sample : profile.kernels) {
      if (sample.op != KernelOp::gemm) continue;
      const auto sample_precision = training_precision(sample.precision);
      if (!sample_precision) continue;
      if (cpu ? *sample_precision != Precision::fp32 : *sample_precision != precision) continue;
      points.emplace_back(sample.gemm_flops(), sample.seconds);
    }
    std::sort(points.begin(), points.end());
    for (std::size_t i = 0; i < points.size();) {
      std::size_t j = i;
      std::vector<double> seconds;
      while (j < points.size() && points[j].first == points[i].first) seconds.push_back(points[j++].second);
      c.log_flops.push_back(std::log(points[i].first));
      c.log_seconds.push_back(std::log(median(seconds)));
      i = j;
    }
    if (cpu) c.peak = device_.peak_fp32_flops_per_s;
  }
  // Streaming bandwidth from measured elementwise kernels of at least 1 MiB.
  std::vector<double> rates;
  for (const KernelSample& sample : profile.kernels) {
    if (sample.op != KernelOp::elementwise) continue;
    const double bytes = sample.elements * streamed_bytes_per_element(sample.op);
    if (bytes >= 1 << 20) rates.push_back(bytes / sample.seconds);
  }
  memory_bw_ = rates.empty() ? device_.memory_bandwidth_bytes_per_s * device_.memory_efficiency : median(rates);
  host_bw_per_device_ = cluster_.host_memory_bandwidth_bytes_per_s / std::max(gpus_per_node_, 1);

  intra_bw_ = cluster_.intra_node.bandwidth_bytes_per_s * cluster_.intra_node.efficiency;
  intra_latency_s_ = cluster_.intra_node.latency_s;
  if (auto fit = fit_link(profile.links, cluster_.name + "/intra")) {
    intra_bw_ = fit->bus_bandwidth_bytes_per_s;
    intra_latency_s_ = fit->alpha_s;
    intra_measured_ = true;
    for (int op = 0; op < 7; ++op) {
      intra_fits_[op] = fit_link(profile.links, cluster_.name + "/intra", CollectiveAlgorithm::ring, Collective(op));
    }
  }
  if (cluster_.inter_node) {
    const InterNodeFabric& inter = *cluster_.inter_node;
    double per_device = inter.nics_per_node * inter.bandwidth_per_nic_bytes_per_s * inter.efficiency /
                        std::max(gpus_per_node_, 1);
    double hops = 1.0;
    switch (inter.topology) {
      case Topology::fat_tree:
        per_device /= inter.oversubscription;
        break;
      case Topology::torus: {
        // Average hop count of a k-ary torus in D dimensions: D * k / 4.
        const double side = std::pow(double(std::max(nodes, 1)), 1.0 / inter.torus_dimensions);
        hops = std::max(1.0, inter.torus_dimensions * side / 4.0);
        break;
      }
      case Topology::dragonfly:
        // Minimal routes: one hop inside a group, local-global-local across groups.
        hops = nodes > inter.dragonfly_group_nodes ? 3.0 : 1.0;
        break;
    }
    inter_bw_ = per_device;
    inter_latency_s_ = inter.latency_s * hops;
    if (auto fit = fit_link(profile.links, cluster_.name + "/inter")) {
      inter_bw_ = fit->bus_bandwidth_bytes_per_s;
      inter_latency_s_ = fit->alpha_s * hops;
      inter_measured_ = true;
      for (int op = 0; op < 7; ++op) {
        inter_fits_[op] = fit_link(profile.links, cluster_.name + "/inter", CollectiveAlgorithm::ring, Collective(op));
      }
    }
    inter_hops_ = hops;
  } else {
    inter_bw_ = intra_bw_;
    inter_latency_s_ = intra_latency_s_;
    inter_fits_ = intra_fits_;
  }
  share_cores();
}

void CostLookup::share_cores() {
  if (device_.kind != "cpu" || gpus_per_node_ <= 1) return;
  if (device_.cores <= 0) {
    flags_.fetch_or(kCoresUnstated, std::memory_order_relaxed);
    return;
  }
  if (gpus_per_node_ <= device_.cores) return;
  core_sharing_ = double(gpus_per_node_) / device_.cores;
  // The per-collective fits are divided in level_time_s; these serve everything else
  // (the cluster-spec fallback and the simulator's links).
  memory_bw_ /= core_sharing_;
  intra_bw_ /= core_sharing_;
  intra_latency_s_ *= core_sharing_;
  inter_bw_ /= core_sharing_;
  inter_latency_s_ *= core_sharing_;
  flags_.fetch_or(kCoresShared, std::memory_order_relaxed);
}

CostLookup::CostLookup(const CostLookup& other)
    : device_(other.device_),
      cluster_(other.cluster_),
      gpus_per_node_(other.gpus_per_node_),
      core_sharing_(other.core_sharing_),
      fitted_(other.fitted_),
      framework_(other.framework_),
      kernels_(other.kernels_),
      calibration_(other.calibration_),
      calibration_note_(other.calibration_note_),
      prediction_bounds_(other.prediction_bounds_),
      memory_bw_(other.memory_bw_),
      intra_measured_(other.intra_measured_),
      inter_measured_(other.inter_measured_),
      flags_(other.flags_.load()),
      host_bw_per_device_(other.host_bw_per_device_),
      intra_bw_(other.intra_bw_),
      intra_latency_s_(other.intra_latency_s_),
      inter_bw_(other.inter_bw_),
      inter_latency_s_(other.inter_latency_s_),
      intra_fits_(other.intra_fits_),
      inter_fits_(other.inter_fits_),
      inter_hops_(other.inter_hops_) {
  for (std::size_t i = 0; i < std::size(curves_); ++i) curves_[i] = other.curves_[i];
}

const CostLookup::Curve& CostLookup::curve(Precision precision) const { return curves_[int(precision)]; }

double CostLookup::curve_seconds(double gemm_flops, Precision precision) const {
  const Curve& c = curve(precision);
  const double flops = std::max(gemm_flops, 1.0);
  if (c.log_flops.empty()) {
    raise(kGemmRoofline);
    return flops / c.peak;
  }
  const double x = std::log(flops);
  if (c.log_flops.size() == 1 || x <= c.log_flops.front() || x >= c.log_flops.back()) {
    // Outside the samples: keep the rate of the nearest end point.
    const bool below = c.log_flops.size() > 1 && x <= c.log_flops.front();
    const std::size_t end = below || c.log_flops.size() == 1 ? 0 : c.log_flops.size() - 1;
    if (x != c.log_flops[end]) raise(kGemmExtrapolated);
    return std::exp(c.log_seconds[end] + (x - c.log_flops[end]));
  }
  const auto upper = std::size_t(std::upper_bound(c.log_flops.begin(), c.log_flops.end(), x) - c.log_flops.begin());
  const double x0 = c.log_flops[upper - 1], x1 = c.log_flops[upper];
  const double y0 = c.log_seconds[upper - 1], y1 = c.log_seconds[upper];
  return std::exp(y0 + (y1 - y0) * (x - x0) / (x1 - x0));
}

double CostLookup::gemm_seconds(double gemm_flops, Precision precision) const {
  return curve_seconds(gemm_flops, precision) * core_sharing_ / calibration_.gemm_efficiency_scale;
}

double CostLookup::gemm_efficiency(double gemm_flops, Precision precision) const {
  return gemm_flops / (gemm_seconds(gemm_flops, precision) * curve(precision).peak);
}

double CostLookup::gemm_time_s(double total_flops, double gemm_flops, Precision precision) const {
  if (total_flops <= 0) return 0;
  return total_flops / gemm_flops * gemm_seconds(gemm_flops, precision);
}

double CostLookup::gemm_time_s(double m, double n, double k, Precision precision) const {
  return gemm_seconds(2.0 * m * n * k, precision);
}

double CostLookup::attention_time_s(double total_flops, double gemm_flops, Precision precision) const {
  if (total_flops <= 0) return 0;
  return total_flops / gemm_flops * curve_seconds(gemm_flops, precision) * core_sharing_ /
         calibration_.attention_efficiency_scale;
}

double CostLookup::memory_time_s(double bytes) const {
  return bytes / (memory_bw_ * calibration_.memory_efficiency_scale);
}

double CostLookup::library_memory_time_s(double bytes) const { return bytes / memory_bw_; }

double CostLookup::host_memory_time_s(double bytes) const { return bytes / host_bw_per_device_; }

double CostLookup::host_device_time_s(double bytes) const {
  return bytes / cluster_.host_device_bandwidth_bytes_per_s;
}

double CostLookup::level_time_s(Collective op, int ranks, double size_bytes, double bandwidth,
                                double latency_s, const OpFits& fits, double latency_scale, double bus_efficiency,
                                CollectiveAlgorithm algorithm) const {
  if (ranks <= 1 && op != Collective::send_recv) return 0;
  if (const auto& fit = fits[std::size_t(op)]; fit && algorithm == CollectiveAlgorithm::ring) {
    bandwidth = fit->bus_bandwidth_bytes_per_s / core_sharing_;
    latency_s = fit->alpha_s * latency_scale * core_sharing_;
  }
  return collective_steps(op, ranks, algorithm) * latency_s +
         size_bytes * bus_bandwidth_factor(op, ranks) / (bandwidth * bus_efficiency);
}

double CostLookup::collective_time_s(Collective op, GroupPlacement group, double size_bytes,
                                     CollectiveAlgorithm algorithm) const {
  if (size_bytes <= 0 || (group.ranks <= 1 && op != Collective::send_recv)) return 0;
  return alpha_beta_time_s(op, group, size_bytes, algorithm) + calibration_.collective_call_overhead_s;
}

double CostLookup::alpha_beta_time_s(Collective op, GroupPlacement group, double size_bytes,
                                     CollectiveAlgorithm algorithm) const {
  const int k = group.ranks_per_node;
  const int nodes = group.nodes();
  auto intra = [&](Collective level_op, double bytes) {
    return level_time_s(level_op, k, bytes, intra_bw_, intra_latency_s_, intra_fits_, 1.0,
                        calibration_.intra_bus_efficiency, algorithm);
  };
  auto inter = [&](Collective level_op, double bytes) {
    return level_time_s(level_op, nodes, bytes, inter_bw_, inter_latency_s_, inter_fits_, inter_hops_,
                        calibration_.inter_bus_efficiency, algorithm);
  };
  if (nodes <= 1) return intra(op, size_bytes);
  if (k <= 1) return inter(op, size_bytes);
  switch (op) {
    case Collective::all_reduce:
      return intra(Collective::reduce_scatter, size_bytes) + inter(Collective::all_reduce, size_bytes / k) +
             intra(Collective::all_gather, size_bytes);
    case Collective::all_gather:
      return inter(Collective::all_gather, size_bytes / k) + intra(Collective::all_gather, size_bytes);
    case Collective::reduce_scatter:
      return intra(Collective::reduce_scatter, size_bytes) + inter(Collective::reduce_scatter, size_bytes / k);
    case Collective::all_to_all:
      return inter(Collective::all_to_all, size_bytes) + intra(Collective::all_to_all, size_bytes / nodes);
    case Collective::broadcast:
    case Collective::reduce:
      // Pipelined through both levels: the slower level sets the rate.
      return collective_steps(op, nodes, algorithm) * inter_latency_s_ +
             collective_steps(op, k, algorithm) * intra_latency_s_ +
             size_bytes / std::min(intra_bw_ * calibration_.intra_bus_efficiency,
                                   inter_bw_ * calibration_.inter_bus_efficiency);
    case Collective::send_recv:
      return inter_latency_s_ + size_bytes / (inter_bw_ * calibration_.inter_bus_efficiency);
  }
  return 0;
}

}  // namespace tessel::profiles
