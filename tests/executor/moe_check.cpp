// Runs under mpirun on 2 and 4 ranks (moe_test.cpp launches it): the MoE MLP with experts
// sharded over ep ranks (and ep 2 with two replicas on 4 ranks) against the same layer on
// one process: outputs, input gradients and the auxiliary loss equal; router, shared and
// expert gradients, reduced over their groups, equal the one-process sums; the all-to-all
// bytes equal the dispatch/combine formula. Prints "ok rank" per rank; exits 1 on failure.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "tessel/executor/comm/mpi_communicator.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/executor/moe_groups.hpp"
#include "tessel/executor/moe_layer.hpp"

using namespace tessel;
using namespace tessel::executor;

namespace {
int failures = 0;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what, int rank) {
  // Relative to the tensor's largest value: elements near zero come from cancelling sums
  // whose rounding depends on the GEMMs' row counts, which differ between the two runs.
  bool ok = got.size() == want.size();
  double worst = 0, scale = 1e-12;
  for (std::size_t i = 0; ok && i < want.size(); ++i) scale = std::max(scale, std::abs(double(want[i])));
  for (std::size_t i = 0; ok && i < got.size(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - double(want[i])) / scale);
  }
  if (!ok || worst > 1e-5) {
    std::fprintf(stderr, "rank %d: %s differs (sizes %zu %zu, worst relative %.3g)\n", rank, what, got.size(),
                 want.size(), worst);
    ++failures;
  }
}

std::vector<float> normal_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> values(n);
  for (float& v : values) v = normal(rng);
  return values;
}

// The layer with experts over ep ranks of the world (the data-parallel group here)
// against one process; gradients reduced as the trainer reduces them: the router and
// shared experts over the whole group, the experts over their expert-data-parallel group.
void check_expert_parallel(Communicator& world, int ep) {
  const int me = world.rank();
  auto& cpu = kernels::cpu_backend();
  OpTimeline timeline(cpu);
  const MoeShape shape{8, 8, 2, 5, 4, true, 0.0, 0.02f};
  const int tokens = 6, h = shape.hidden;

  SingleRankCommunicator alone;
  MoeLayer reference(cpu, shape, alone, timeline);
  ExpertGroups groups = split_expert_groups(world, ep);
  Communicator& ep_group = *groups.expert_parallel;
  MoeLayer sharded(cpu, shape, ep_group, timeline);

  const std::vector<float> all_params = normal_values(reference.parameter_count(), 7);
  const std::vector<float> x = normal_values(std::size_t(tokens * h), 100 + unsigned(me));
  const std::vector<float> dy = normal_values(std::size_t(tokens * h), 200 + unsigned(me));
  // This rank's parameters: router and shared experts, then its slice of the experts.
  std::vector<float> local(all_params.begin(), all_params.begin() + std::ptrdiff_t(reference.expert_offset(0)));
  local.insert(local.end(), all_params.begin() + std::ptrdiff_t(reference.expert_offset(sharded.first_expert())),
               all_params.begin() + std::ptrdiff_t(reference.expert_offset(sharded.first_expert() + sharded.local_experts())));

  Buffer xb(cpu, DType::f32), dyb(cpu, DType::f32);
  xb.upload(x);
  dyb.upload(dy);
  // One process, all experts, this rank's tokens; gradients summed over every rank.
  Buffer y_ref(cpu, DType::f32), dx_ref(cpu, DType::f32);
  MoeActivations a_ref;
  const double aux_ref = reference.forward("mb0/L0/fwd/", all_params.data(), xb, tokens, y_ref, a_ref);
  std::vector<float> grads_ref(all_params.size(), 0.0f);
  reference.backward("mb0/L0/bwd/", all_params.data(), grads_ref.data(), xb, a_ref, dyb, dx_ref, 0.5f);
  world.all_reduce(grads_ref.data(), grads_ref.size());

  // Expert parallel.
  Buffer y(cpu, DType::f32), dx(cpu, DType::f32);
  MoeActivations a;
  ep_group.reset_counters();
  const double aux = sharded.forward("mb0/L0/fwd/", local.data(), xb, tokens, y, a);
  const double forward_bytes = ep_group.counters().bytes_sent;
  std::vector<float> grads(local.size(), 0.0f);
  sharded.backward("mb0/L0/bwd/", local.data(), grads.data(), xb, a, dyb, dx, 0.5f);
  const double step_bytes = ep_group.counters().bytes_sent;
  const std::size_t replicated = sharded.expert_offset(0);
  world.all_reduce(grads.data(), replicated);
  groups.expert_data->all_reduce(grads.data() + replicated, grads.size() - replicated);

  expect_close(y.download(), y_ref.download(), "output", me);
  expect_close(dx.download(), dx_ref.download(), "input gradient", me);
  if (std::abs(aux - aux_ref) > 1e-9) std::fprintf(stderr, "rank %d: aux loss differs\n", me), ++failures;
  expect_close(std::vector<float>(grads.begin(), grads.begin() + std::ptrdiff_t(replicated)),
               std::vector<float>(grads_ref.begin(), grads_ref.begin() + std::ptrdiff_t(replicated)),
               "router and shared gradients", me);
  const auto first = std::ptrdiff_t(reference.expert_offset(sharded.first_expert()));
  expect_close(std::vector<float>(grads.begin() + std::ptrdiff_t(replicated), grads.end()),
               std::vector<float>(grads_ref.begin() + first,
                                  grads_ref.begin() + first + std::ptrdiff_t(grads.size() - replicated)),
               "expert gradients", me);

  // Traffic: the counts (local experts x 4 bytes to every other ep rank), then the rows
  // that leave this rank on dispatch (send_rows) and on combine (recv_rows), H fp32
  // each; the backward moves the same rows the other way.
  double leaving_rows = 0;
  for (int q = 0; q < ep; ++q) {
    if (q != ep_group.rank()) leaving_rows += double(a.send_rows[std::size_t(q)] + a.recv_rows[std::size_t(q)]);
  }
  const double count_bytes = double(sharded.local_experts()) * 4.0 * (ep - 1);
  const double row_bytes = leaving_rows * h * 4.0;
  if (forward_bytes != count_bytes + row_bytes || step_bytes != count_bytes + 2 * row_bytes) {
    std::fprintf(stderr, "rank %d: all-to-all bytes %.0f / %.0f, formula %.0f / %.0f\n", me, forward_bytes, step_bytes,
                 count_bytes + row_bytes, count_bytes + 2 * row_bytes);
    ++failures;
  }
  world.all_reduce(&leaving_rows, 1, DType::f64);
  if (leaving_rows == 0) std::fprintf(stderr, "rank %d: no row crossed ranks: the test proves nothing\n", me), ++failures;
}
}  // namespace

int main() {
  Communicator& world = mpi_world();
  check_expert_parallel(world, world.size());       // ep = dp
  if (world.size() == 4) check_expert_parallel(world, 2);  // dp 4 with ep 2: two expert replicas
  if (failures == 0) std::printf("ok rank %d\n", world.rank());
  return failures == 0 ? 0 : 1;
}
