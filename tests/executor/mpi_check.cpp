// Runs under mpirun (tests/executor/comm_test.cpp launches it on 8 ranks): every
// collective of the MPI communicator, and of the host-staged one that ranks sharing a
// GPU use, against values each rank computes itself, the traffic counters against the
// ring definitions, and the process grid's groups for a
// dp x pp x tp layout and a 2D tensor grid. Prints "ok" per rank; any failure aborts.
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tessel/executor/comm/host_staged_communicator.hpp"
#include "tessel/executor/comm/mpi_communicator.hpp"
#include "tessel/kernels/numeric.hpp"
#include "tessel/executor/process_grid.hpp"

using namespace tessel;
using namespace tessel::executor;

namespace {
int failures = 0;
void check(bool condition, const char* what, int rank) {
  if (!condition) {
    std::fprintf(stderr, "rank %d: check failed: %s\n", rank, what);
    ++failures;
  }
}

// The sum of `value(r)` over the ranks r that share `group` with `rank`.
template <typename Same, typename Value>
float expected_sum(int world, int rank, Same same, Value value) {
  float sum = 0;
  for (int r = 0; r < world; ++r) {
    if (same(rank, r)) sum += value(r);
  }
  return sum;
}

// All-to-all, equal and variable blocks: rank q sends rank r the values 100 q + r + i
// (i < its block), and the counters hold exactly the bytes that leave the rank.
template <typename Check>
void check_all_to_all(Communicator& world, Check check_labelled) {
  const int n = world.size(), me = world.rank();
  std::vector<float> blocks(static_cast<std::size_t>(2 * n)), received(std::size_t(2 * n), -1.0f);
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < 2; ++i) blocks[std::size_t(2 * r + i)] = float(100 * me + r + i);
  }
  world.reset_counters();
  world.all_to_all(blocks.data(), received.data(), 2, DType::f32);
  bool equal_ok = true;
  for (int q = 0; q < n; ++q) {
    for (int i = 0; i < 2; ++i) equal_ok = equal_ok && received[std::size_t(2 * q + i)] == float(100 * q + me + i);
  }
  check_labelled(equal_ok, "all_to_all equal blocks");
  check_labelled(world.counters().bytes_sent == 2.0 * 4.0 * (n - 1), "all_to_all bytes = size x (n-1)/n");
  check_labelled(world.counters().messages == double(n - 1), "all_to_all messages n-1");
  // Variable: rank q sends (q + r) % 3 elements to rank r (some blocks empty).
  auto block_size = [](int from, int to) { return std::size_t((from + to) % 3); };
  std::vector<std::size_t> send_counts(static_cast<std::size_t>(n)), recv_counts(static_cast<std::size_t>(n));
  std::vector<std::int32_t> outgoing;
  double leaving = 0;
  for (int r = 0; r < n; ++r) {
    send_counts[std::size_t(r)] = block_size(me, r);
    recv_counts[std::size_t(r)] = block_size(r, me);
    for (std::size_t i = 0; i < send_counts[std::size_t(r)]; ++i) outgoing.push_back(1000 * me + 10 * r + int(i));
    if (r != me) leaving += double(send_counts[std::size_t(r)]);
  }
  std::vector<std::int32_t> incoming;
  for (int q = 0; q < n; ++q) {
    for (std::size_t i = 0; i < recv_counts[std::size_t(q)]; ++i) incoming.push_back(-1);
  }
  world.reset_counters();
  world.all_to_all_v(outgoing.data(), send_counts, incoming.data(), recv_counts, DType::i32);
  std::size_t at = 0;
  bool variable_ok = true;
  for (int q = 0; q < n; ++q) {
    for (std::size_t i = 0; i < recv_counts[std::size_t(q)]; ++i) {
      variable_ok = variable_ok && incoming[at++] == 1000 * q + 10 * me + int(i);
    }
  }
  check_labelled(variable_ok, "all_to_all_v variable blocks");
  check_labelled(world.counters().bytes_sent == leaving * 4.0, "all_to_all_v bytes = what leaves the rank");
}

// Every collective on `comm` (the world's ranks) against values each rank computes
// itself, and the traffic counters against the ring definitions; `label` names the
// implementation in messages.
void check_collectives(Communicator& world, const char* label) {
  const int n = world.size(), me = world.rank();
  auto check_labelled = [&](bool condition, const char* what) {
    if (!condition) std::fprintf(stderr, "%s: ", label);
    check(condition, what, me);
  };
  world.reset_counters();
  float value = float(me + 1);
  world.all_reduce(&value, 1);
  check_labelled(value == float(n * (n + 1) / 2), "all_reduce sum");
  check_labelled(world.counters().bytes_sent == 2.0 * (n - 1) / n * 4.0, "all_reduce bytes counted as a ring");
  check_labelled(world.counters().messages == 2.0 * (n - 1), "all_reduce messages counted as a ring");
  float top = float(me);
  world.all_reduce(&top, 1, ReduceOp::max);
  check_labelled(top == float(n - 1), "all_reduce max");
  const float mine[2] = {float(me), float(10 * me)};
  std::vector<float> gathered(static_cast<std::size_t>(2 * n));
  world.all_gather(mine, gathered.data(), 2, DType::f32);
  for (int r = 0; r < n; ++r) {
    check_labelled(gathered[std::size_t(2 * r)] == float(r) && gathered[std::size_t(2 * r + 1)] == float(10 * r),
                   "all_gather");
  }
  std::vector<float> contributions(static_cast<std::size_t>(n), float(me));
  float reduced = 0;
  world.reduce_scatter(contributions.data(), &reduced, 1, DType::f32);
  check_labelled(reduced == float(n * (n - 1) / 2), "reduce_scatter");
  float shared = me == 3 ? 42.0f : 0.0f;
  world.broadcast(&shared, 1, DType::f32, 3);
  check_labelled(shared == 42.0f, "broadcast");
  float to_root = float(me), at_root = -1;
  world.reduce(&to_root, &at_root, 1, DType::f32, 2);
  if (me == 2) check_labelled(at_root == float(n * (n - 1) / 2), "reduce");
  // A ring of send/recv, even ranks first to avoid a cycle of blocking sends.
  const int next = (me + 1) % n, previous = (me + n - 1) % n;
  float token = float(me), from_previous = -1;
  if (me % 2 == 0) {
    world.send(&token, 1, DType::f32, next, 7);
    world.recv(&from_previous, 1, DType::f32, previous, 7);
  } else {
    world.recv(&from_previous, 1, DType::f32, previous, 7);
    world.send(&token, 1, DType::f32, next, 7);
  }
  check_labelled(from_previous == float(previous), "send/recv ring");
  std::vector<float> big(1000, 1.0f);
  auto request = world.all_reduce_async(big.data(), big.size(), DType::f32);
  request->wait();
  check_labelled(big[999] == float(n), "all_reduce_async");
  std::vector<float> parts(static_cast<std::size_t>(2 * n), 1.0f), part(2, 0.0f);
  world.reduce_scatter_async(parts.data(), part.data(), 2, DType::f32)->wait();
  check_labelled(part[0] == float(n) && part[1] == float(n), "reduce_scatter_async");
  // bf16 travels as 16-bit words and reduces through widening to fp32: 1.5 per rank sums
  // exactly (small integers and halves are exact in bf16).
  std::uint16_t half = kernels::numeric::to_bf16(1.5f);
  world.all_reduce(&half, 1, DType::bf16);
  check_labelled(kernels::numeric::from_bf16(half) == 1.5f * float(n), "bf16 all_reduce sum");
  std::uint16_t half_top = kernels::numeric::to_bf16(float(me));
  world.all_reduce(&half_top, 1, DType::bf16, ReduceOp::max);
  check_labelled(kernels::numeric::from_bf16(half_top) == float(n - 1), "bf16 all_reduce max");
  double wide = 0.25 * (me + 1);
  world.all_reduce(&wide, 1, DType::f64);
  check_labelled(wide == 0.25 * n * (n + 1) / 2, "f64 all_reduce sum");
  check_all_to_all(world, check_labelled);
}
}  // namespace

int main() {
  Communicator& world = mpi_world();
  const int n = world.size(), me = world.rank();

  // ---- collectives: MPI, and MPI staged through the (CPU) backend's memory, the path
  // of ranks that share a GPU ----
  check_collectives(world, "mpi");
  HostStagedCommunicator staged(world.split(0, me), kernels::cpu_backend());
  check_collectives(staged, "host-staged mpi");

  // ---- process grid: dp 2 x pp 2 x tp 2 ----
  ParallelConfig p;
  p.dp = 2, p.pp = 2, p.tp = 2;
  if (p.world_size() == n) {
    ProcessGrid grid(p, world);
    const auto c = grid.coordinates();
    auto coords = [&](int r) { return RankLayout(p).coordinates(r); };
    auto rank_value = [](int r) { return float(r * r + 1); };
    struct Case {
      Communicator* comm;
      bool (*same)(const RankCoordinates&, const RankCoordinates&);
      const char* name;
    };
    const Case cases[] = {
        {&grid.tp(), [](const RankCoordinates& a, const RankCoordinates& b) { return a.dp == b.dp && a.pp == b.pp && a.sp == b.sp; }, "tp"},
        {&grid.dp(), [](const RankCoordinates& a, const RankCoordinates& b) { return a.tp == b.tp && a.pp == b.pp && a.sp == b.sp; }, "dp"},
        {&grid.pp(), [](const RankCoordinates& a, const RankCoordinates& b) { return a.tp == b.tp && a.dp == b.dp && a.sp == b.sp; }, "pp"},
        {&grid.gradients(), [](const RankCoordinates& a, const RankCoordinates& b) { return a.tp == b.tp && a.pp == b.pp; }, "gradients"},
    };
    for (const Case& group : cases) {
      float x = rank_value(me);
      group.comm->all_reduce(&x, 1);
      const float want = expected_sum(n, me, [&](int a, int b) { return group.same(coords(a), coords(b)); }, rank_value);
      check(x == want, group.name, me);
    }
    check(grid.tp().size() == 2 && grid.dp().size() == 2 && grid.pp().size() == 2, "group sizes", me);
    check(grid.pp().rank() == c.pp && grid.tp().rank() == c.tp && grid.dp().rank() == c.dp, "group ranks follow coordinates", me);
  }
  // ---- a 2D tensor grid: dp 2 x tp 4 (q = 2) ----
  ParallelConfig g2;
  g2.dp = 2, g2.tp = 4, g2.tp_mode = TpMode::d2;
  if (g2.world_size() == n) {
    ProcessGrid grid(g2, world);
    auto coords = [&](int r) { return RankLayout(g2).coordinates(r); };
    float row = float(me), col = float(me);
    grid.tp_row().all_reduce(&row, 1);
    grid.tp_col().all_reduce(&col, 1);
    const auto mine_c = coords(me);
    const float want_row = expected_sum(n, me, [&](int, int b) {
      const auto o = coords(b);
      return o.dp == mine_c.dp && o.tp_row == mine_c.tp_row;
    }, [](int r) { return float(r); });
    const float want_col = expected_sum(n, me, [&](int, int b) {
      const auto o = coords(b);
      return o.dp == mine_c.dp && o.tp_col == mine_c.tp_col;
    }, [](int r) { return float(r); });
    check(row == want_row, "2d row group", me);
    check(col == want_col, "2d column group", me);
    check(grid.tp_row().size() == 2 && grid.tp_col().size() == 2, "2d group sizes", me);
  }
  world.barrier();
  if (failures > 0) return 1;
  std::printf("ok rank %d\n", me);
  return 0;
}
