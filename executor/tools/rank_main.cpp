// tessel-rank: one rank of `tessel run`. `tessel run` starts it under mpirun or srun (or
// execs it when the ranks were started already, by the user or the cluster): the tessel
// command itself links SimGrid, whose SMPI exports the MPI symbols too, so MPI code
// lives in this binary. Each rank trains on the CPU or on its GPU (rank_device.hpp).
//   tessel-rank --plan P --steps N --seed S --lr LR [--data FILE] [--db FILE] [--trace FILE]
//               [--checkpoint DIR [--checkpoint-every K]] [--resume DIR] [--clip-grad-norm X]
//               [--backend auto|cpu|cuda]
// Measured op events: every rank sends its own to rank 0 over MPI as text (ranks on
// other nodes share no file system with it); rank 0 merges them into the runs database
// and the Chrome trace.
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <iostream>
#include <map>
#include <string>

#include <fmt/format.h>

#include "tessel/core/chrome_trace.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/program.hpp"
#include "tessel/executor/comm/mpi_communicator.hpp"
#include "tessel/executor/rank_device.hpp"
#include "tessel/executor/trainer.hpp"
#include "tessel/executor/run_options.hpp"
#include "tessel/profiles/run_store.hpp"

namespace tessel {
namespace {
using RunArgs = executor::RunOptions;

// One line per event: step, start, end, op id.
std::string events_text(const std::vector<executor::OpEvent>& events) {
  std::string out;
  for (const executor::OpEvent& e : events) out += fmt::format("{} {:.9f} {:.9f} {}\n", e.step, e.start_s, e.end_s, e.op);
  return out;
}

// Every rank's events as text on rank 0, in rank order (empty elsewhere). They travel
// over MPI, padded to 32-bit words: ranks on other nodes share no file system with it.
std::vector<std::string> gather_events_text(executor::Communicator& world, const std::string& mine) {
  constexpr int kLengthTag = 9001, kTextTag = 9002;
  auto words = [](std::size_t bytes) { return (bytes + 3) / 4; };
  std::vector<std::string> out;
  if (world.rank() != 0) {
    const std::int32_t length = std::int32_t(mine.size());
    std::vector<std::int32_t> padded(words(mine.size()), 0);
    std::memcpy(padded.data(), mine.data(), mine.size());
    world.send(&length, 1, kernels::DType::i32, 0, kLengthTag);
    if (length > 0) world.send(padded.data(), padded.size(), kernels::DType::i32, 0, kTextTag);
    return out;
  }
  out.push_back(mine);
  for (int rank = 1; rank < world.size(); ++rank) {
    std::int32_t length = 0;
    world.recv(&length, 1, kernels::DType::i32, rank, kLengthTag);
    std::vector<std::int32_t> padded(words(std::size_t(length)), 0);
    if (length > 0) world.recv(padded.data(), padded.size(), kernels::DType::i32, rank, kTextTag);
    out.emplace_back(reinterpret_cast<const char*>(padded.data()), std::size_t(length));
  }
  return out;
}

std::vector<profiles::EventRecord> parse_events(const std::vector<std::string>& per_rank, const Program& program) {
  std::map<std::string, Stream, std::less<>> stream_of;
  for (int s = 0; s < program.stages(); ++s) {
    for (const ProgramOp& op : program.stage(s).ops) stream_of.emplace(op.id, op.stream);
  }
  std::vector<profiles::EventRecord> events;
  for (std::size_t rank = 0; rank < per_rank.size(); ++rank) {
    std::istringstream in(per_rank[rank]);
    profiles::EventRecord e;
    e.rank = int(rank);
    while (in >> e.step >> e.start_s >> e.end_s >> e.op) {
      const auto found = stream_of.find(e.op);
      // An id the Program does not know keeps the stream "unknown": the op-coverage test
      // catches it.
      e.stream = found == stream_of.end() ? "unknown" : std::string(to_string(found->second));
      events.push_back(e);
    }
  }
  return events;
}

// The ranks MPI sees must be the plan's, and the launcher's if it said how many.
void check_world(executor::Communicator& world, const Plan& plan) {
  const executor::LaunchedRank launched = executor::read_launched_rank(executor::process_environment());
  if (launched.world_size && *launched.world_size != world.size()) {
    throw Error(fmt::format("the launcher's environment ({}) names {} ranks but MPI sees {}: start the ranks with an "
                            "MPI launcher (mpirun, or srun with PMI)",
                            launched.source, *launched.world_size, world.size()));
  }
  if (world.size() != plan.parallel.world_size()) {
    throw Error(fmt::format("parallel: the plan's world size dp*pp*tp*sp = {} differs from the {} MPI ranks running",
                            plan.parallel.world_size(), world.size()));
  }
}

int train(const RunArgs& args, const Plan& plan) {
  executor::Communicator& world = executor::mpi_world();
  const bool reporter = world.rank() == 0;
  try {
    check_world(world, plan);
    const executor::Environment environment = executor::process_environment();
    executor::RankDevice device =
        executor::make_rank_device(executor::parse_backend(args.backend), plan, world, environment);
    if (reporter && !device.note.empty()) std::cout << device.note << "\n" << std::flush;
    executor::ProcessGrid grid(plan.parallel, world, device.device_world.get());
    const int dp_rank = grid.coordinates().dp, dp = plan.parallel.dp;
    executor::DataLoader loader =
        args.data_file.empty()
            ? executor::DataLoader(executor::synthetic_corpus(1 << 20, args.seed), plan.train.global_batch,
                                   plan.seq_len(), dp_rank, dp)
            : executor::DataLoader::from_file(args.data_file, plan.train.global_batch, plan.seq_len(), dp_rank, dp);
    executor::TrainerOptions options;
    options.seed = args.seed;
    options.lr = args.lr;
    options.clip_grad_norm = args.clip_grad_norm;
    executor::Trainer trainer(plan, grid, std::move(loader), options, *device.backend);
    if (!args.resume.empty()) {
      trainer.load(args.resume);
      if (reporter) std::cout << fmt::format("resumed from step {} ({})\n", trainer.steps_done(), args.resume);
    }
    std::unique_ptr<profiles::ProfileStore> store;
    std::unique_ptr<profiles::RunStore> runs;
    std::int64_t run_id = 0;
    if (reporter) {
      store = std::make_unique<profiles::ProfileStore>(args.db.empty() ? profiles::ProfileStore::default_path() : args.db);
      runs = std::make_unique<profiles::RunStore>(*store);
      run_id = runs->begin_run(plan.to_json(), device.owned_backend ? "cuda" : "cpu", args.steps);
      std::cout << fmt::format("run {}: {} on {} {} ranks ({}), {} steps\n", run_id, plan.model.name, world.size(),
                               device.owned_backend ? "GPU" : "CPU", plan.parallel.summary(), args.steps)
                << std::flush;
    }
    std::vector<profiles::StepRecord> steps;
    // Fault injection for the failure tests: TESSEL_FAIL_AT=<rank>:<step> makes that
    // rank raise an error before that step.
    int fail_rank = -1, fail_step = -1;
    if (const char* spec = std::getenv("TESSEL_FAIL_AT")) std::sscanf(spec, "%d:%d", &fail_rank, &fail_step);
    while (trainer.steps_done() < args.steps) {
      if (world.rank() == fail_rank && trainer.steps_done() + 1 == fail_step) {
        throw Error(fmt::format("injected failure before step {} (TESSEL_FAIL_AT)", fail_step));
      }
      const executor::StepStats stats = trainer.step();
      if (reporter) {
        // The bar shares stdout with the step lines, so mpirun forwards them in order.
        if (args.progress) std::cout << fmt::format("\r{:80}\r", "");  // the bar gives way to the step line
        std::cout << fmt::format("step {} loss {:.6f}  {:.0f} tokens/s  step {:.3f} s\n", stats.step, stats.loss,
                                 stats.tokens_per_s, stats.seconds)
                  << std::flush;
        if (std::isfinite(stats.loss)) steps.push_back({stats.step, stats.loss, stats.seconds, stats.tokens_per_s});
        if (args.progress && stats.step < args.steps) {
          constexpr int kWidth = 30;
          const int filled = kWidth * stats.step / args.steps;
          std::cout << fmt::format("training [{}{}] {}/{} steps  about {:.0f} s left", std::string(filled, '#'),
                                   std::string(kWidth - filled, '.'), stats.step, args.steps,
                                   stats.seconds * (args.steps - stats.step))
                    << std::flush;
        }
      }
      if (!std::isfinite(stats.loss)) {
        if (reporter) {
          runs->add_steps(run_id, steps);
          runs->finish(run_id, "failed", fmt::format("step {}: loss is not finite", stats.step));
        }
        throw Error(fmt::format("step {}: loss is not finite; stopping (the last checkpoint is kept)", stats.step));
      }
      if (!args.checkpoint.empty() && args.checkpoint_every > 0 && stats.step % args.checkpoint_every == 0) {
        trainer.save(args.checkpoint);
      }
    }
    if (!args.checkpoint.empty()) {
      trainer.save(args.checkpoint);
      if (reporter) std::cout << fmt::format("checkpoint at step {} in {}\n", trainer.steps_done(), args.checkpoint);
    }
    const std::vector<std::string> events_per_rank = gather_events_text(world, events_text(trainer.timeline().take()));
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const float peak_bytes = float(usage.ru_maxrss) * 1024.0f;
    std::vector<float> peaks(std::size_t(world.size()), 0.0f);
    world.all_gather(&peak_bytes, peaks.data(), 1, kernels::DType::f32);
    if (reporter) {
      const Program program = Program::lower(plan);
      const std::vector<profiles::EventRecord> events = parse_events(events_per_rank, program);
      runs->add_events(run_id, events);
      if (!args.trace_file.empty()) {
        write_text_file_atomically(args.trace_file, chrome_trace_json(program, profiles::timed_ops(events)));
        std::cout << fmt::format("wrote {} measured events to {}\n", events.size(), args.trace_file);
      }
      runs->add_steps(run_id, steps);
      for (int r = 0; r < world.size(); ++r) runs->set_peak_memory(run_id, r, peaks[std::size_t(r)]);
      runs->finish(run_id, "finished");
      std::cout << fmt::format("wrote run {} to {}\n", run_id, store->path());
    }
    world.barrier();
    return 0;
  } catch (const Error& error) {
    std::fprintf(stderr, "tessel: error: rank %d: %s\n", world.rank(), error.what());
    std::fflush(stderr);
    executor::abort_all_ranks(2);
  }
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) {
  using namespace tessel;
  try {
    const RunArgs args = RunArgs::from_arguments(argc, argv);
    const Plan plan = Plan::load(args.plan_file);
    return train(args, plan);
  } catch (const Error& error) {
    std::fprintf(stderr, "tessel: error: %s\n", error.what());
    return 2;
  }
}
