// tessel-mpi-bench: times MPI collectives on MPI_COMM_WORLD for `tessel profile`, sizes as
// nccl-tests counts them. Each repetition starts at a barrier and takes the slowest rank's time;
// rank 0 prints one JSON line per (collective, size) with the median and spread.
//   tessel-mpi-bench [--min-bytes 1024] [--max-bytes 268435456] [--factor 4]
//                    [--repetitions 5] [--min-seconds 0.02]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tessel/core/input_limits.hpp"

namespace {

struct Options {
  double min_bytes = 1024, max_bytes = 256.0 * 1024 * 1024, factor = 4;
  int repetitions = 5;
  double min_seconds = 0.02;
};

enum class Op { all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send_recv };
const char* kNames[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv"};

struct Stats {
  double median = 0, spread = 0;
};

Stats stats(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const std::size_t n = t.size();
  Stats s;
  s.median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  // (p90 - p10) / median: robust to the odd preempted repetition.
  s.spread = s.median > 0 ? std::min((t[std::size_t(0.9 * double(n - 1))] - t[std::size_t(0.1 * double(n - 1))]) / s.median,
                                     tessel::limits::kMaxSampleSpread)
                           : 0;
  return s;
}

int world_rank = 0, world_size = 1;

// One call of `op` moving `count` floats per the nccl-tests size convention.
void run_once(Op op, std::vector<float>& send, std::vector<float>& recv, long count) {
  const int n = world_size;
  switch (op) {
    case Op::all_reduce:
      MPI_Allreduce(send.data(), recv.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Op::all_gather:
      MPI_Allgather(send.data(), int(count / n), MPI_FLOAT, recv.data(), int(count / n), MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case Op::reduce_scatter:
      MPI_Reduce_scatter_block(send.data(), recv.data(), int(count / n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Op::broadcast:
      MPI_Bcast(send.data(), int(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case Op::all_to_all:
      MPI_Alltoall(send.data(), int(count / n), MPI_FLOAT, recv.data(), int(count / n), MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case Op::send_recv:
      // Half a ping-pong between ranks 0 and 1 is one message's time.
      if (world_rank == 0) {
        MPI_Send(send.data(), int(count), MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(recv.data(), int(count), MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (world_rank == 1) {
        MPI_Recv(recv.data(), int(count), MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(send.data(), int(count), MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
      }
      break;
  }
}

std::vector<double> time_repetitions(Op op, std::vector<float>& send, std::vector<float>& recv, long count, int reps) {
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    run_once(op, send, recv, count);
    double elapsed = MPI_Wtime() - t0, slowest = 0;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    times.push_back(op == Op::send_recv ? slowest / 2 : slowest);
  }
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const double value = std::atof(argv[i + 1]);
    if (key == "--min-bytes") options.min_bytes = value;
    else if (key == "--max-bytes") options.max_bytes = value;
    else if (key == "--factor") options.factor = value;
    else if (key == "--repetitions") options.repetitions = int(value);
    else if (key == "--min-seconds") options.min_seconds = value;
    else {
      if (world_rank == 0) std::fprintf(stderr, "tessel-mpi-bench: unknown option %s\n", key.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  const long max_count = long(options.max_bytes / sizeof(float));
  std::vector<float> send(std::size_t(max_count) + world_size, 1.0f), recv(std::size_t(max_count) + world_size, 0.0f);
  for (Op op : {Op::all_reduce, Op::all_gather, Op::reduce_scatter, Op::broadcast, Op::all_to_all, Op::send_recv}) {
    if (op == Op::send_recv && world_size != 2) continue;  // a pair; measured once, at 2 ranks
    for (double bytes = options.min_bytes; bytes <= options.max_bytes * 1.0001; bytes *= options.factor) {
      long count = long(bytes / sizeof(float));
      count -= count % world_size;  // whole per-rank pieces
      if (count <= 0) continue;
      run_once(op, send, recv, count);  // warm-up
      // Enough repetitions to fill min_seconds, decided on rank 0 from one timing.
      std::vector<double> first = time_repetitions(op, send, recv, count, 1);
      int reps = std::max(options.repetitions, int(options.min_seconds / std::max(first[0], 1e-9)));
      reps = std::min(reps, 1000);
      MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
      Stats s = stats(time_repetitions(op, send, recv, count, reps));
      int flagged = 0;
      if (s.spread > 0.2) {
        s = stats(time_repetitions(op, send, recv, count, reps * 3));
        flagged = s.spread > 0.2;
      }
      if (world_rank == 0) {
        std::printf("{\"collective\": \"%s\", \"ranks\": %d, \"bytes\": %ld, \"seconds\": %.9e, \"spread\": %.4f, "
                    "\"flagged\": %s}\n",
                    kNames[int(op)], op == Op::send_recv ? 2 : world_size, long(count * sizeof(float)), s.median,
                    s.spread, flagged ? "true" : "false");
        std::fflush(stdout);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
