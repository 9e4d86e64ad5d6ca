// tessel-rank: one rank of `tessel run` (its own binary: tessel links SimGrid, whose SMPI exports
// MPI too). Rank 0 gathers every rank's op events over MPI and records steps and how the run ended.
//   tessel-rank --plan P --steps N --seed S --lr LR [--data F [--data-format F] [--data-dtype T]]
//     [--db F] [--trace F] [--checkpoint DIR [--checkpoint-every K]] [--resume DIR | --init F]
//     [--clip-grad-norm X] [--backend auto|cpu|cuda]
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <fmt/format.h>

#include "tessel/core/chrome_trace.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/process_memory.hpp"
#include "tessel/core/program.hpp"
#include "tessel/executor/checkpoint_weights.hpp"
#include "tessel/executor/comm/mpi_communicator.hpp"
#include "tessel/executor/hf_export.hpp"
#include "tessel/executor/rank_device.hpp"
#include "tessel/executor/rank_heartbeat.hpp"
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

// Stopping: SIGTERM, SIGINT, SIGHUP or SIGUSR1 (or the launcher's death: the parent-death signal,
// and a parent that changed) set a flag the ranks agree on after each step, so they stop
// together, after a final checkpoint when --checkpoint is set. The alarm ends a rank
// that cannot get there (its peers gone, a collective that never completes).
volatile std::sig_atomic_t g_stop_signal = 0;
std::string signal_name(int signal) { return fmt::format("SIG{}", sigabbrev_np(signal)); }
pid_t g_parent = 0;
constexpr unsigned kStopGraceSeconds = 30;

extern "C" void on_stop_signal(int signal) {
  if (g_stop_signal == 0) alarm(kStopGraceSeconds);
  g_stop_signal = signal;
}

void stop_with_the_launcher() {
  g_parent = getppid();
  struct sigaction action{};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SIGUSR1: tessel run's request, forwarded by mpirun or srun.
  for (int signal : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaction(signal, &action, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != g_parent) on_stop_signal(SIGTERM);  // the parent died before prctl
}

// Whether any rank was told to stop (collective: every rank calls it after each step).
int agreed_stop_signal(executor::Communicator& world) {
  if (g_stop_signal == 0 && getppid() != g_parent) on_stop_signal(SIGHUP);
  float stop = float(g_stop_signal);
  world.all_reduce(&stop, 1);
  if (stop == 0) return 0;
  return g_stop_signal != 0 ? int(g_stop_signal) : SIGTERM;
}

// Rank 0's record of the run in the database: each step as it ends, so a run that fails
// or is stopped keeps the steps it completed.
struct RunRecorder {
  std::unique_ptr<profiles::ProfileStore> store;
  std::unique_ptr<profiles::RunStore> runs;
  std::int64_t id = 0;

  void begin(const RunArgs& args, const Plan& plan, const std::string& backend) {
    store = std::make_unique<profiles::ProfileStore>(args.db.empty() ? profiles::ProfileStore::default_path() : args.db);
    runs = std::make_unique<profiles::RunStore>(*store);
    // Ranks started by the user's launcher (--launcher none): rank 0 names itself, so
    // that a reader can tell when it is gone.
    const std::string key = args.launch_key.empty()
                                ? fmt::format("running under tessel-rank {} on {}", getpid(), profiles::host_name())
                                : args.launch_key;
    id = runs->begin_run(plan.to_json(), backend, args.steps, key);
  }
  void step(const executor::StepStats& stats) {
    if (runs && std::isfinite(stats.loss)) runs->add_steps(id, {{stats.step, stats.loss, stats.seconds, stats.tokens_per_s}});
  }
  // Never throws: it runs on the way out of a failure.
  void end(const std::string& status, const std::string& message) noexcept {
    if (!runs) return;
    try {
      runs->finish(id, status, message);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "tessel: warning: could not record run %lld as %s: %s\n", static_cast<long long>(id),
                   status.c_str(), error.what());
    }
    runs.reset();
  }
};

// Every rank's memory on rank 0 (empty elsewhere): the trainer's ledger, the device's
// peak on a GPU and the process's peak resident set, as doubles (exact to the byte).
std::vector<RankMemoryMeasured> gather_memory(executor::Communicator& world, const executor::Trainer& trainer,
                                              kernels::Backend& backend) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  RankMemoryMeasured mine = executor::measured_memory(trainer.memory(), world.rank());
  mine.device_peak_bytes = double(backend.device_peak_bytes());
  mine.process_peak_bytes = double(usage.ru_maxrss) * 1024.0;
  constexpr std::size_t kFields = 2 * kMemoryCategories + 4;
  std::vector<double> fields(mine.peak_bytes.begin(), mine.peak_bytes.end());
  fields.insert(fields.end(), mine.at_total_peak_bytes.begin(), mine.at_total_peak_bytes.end());
  fields.insert(fields.end(),
                {mine.total_peak_bytes, mine.device_peak_bytes, mine.process_peak_bytes, mine.host_state_bytes});
  std::vector<double> all(kFields * std::size_t(world.size()));
  world.all_gather(fields.data(), all.data(), kFields, kernels::DType::f64);
  std::vector<RankMemoryMeasured> out;
  if (world.rank() != 0) return out;
  for (int r = 0; r < world.size(); ++r) {
    const double* f = all.data() + kFields * std::size_t(r);
    RankMemoryMeasured m;
    m.rank = r;
    m.by_category = true;
    std::copy_n(f, kMemoryCategories, m.peak_bytes.begin());
    std::copy_n(f + kMemoryCategories, kMemoryCategories, m.at_total_peak_bytes.begin());
    m.total_peak_bytes = f[2 * kMemoryCategories];
    m.device_peak_bytes = f[2 * kMemoryCategories + 1];
    m.process_peak_bytes = f[2 * kMemoryCategories + 2];
    m.host_state_bytes = f[2 * kMemoryCategories + 3];
    out.push_back(m);
  }
  return out;
}

std::string mebibytes(double bytes) { return fmt::format("{:.1f}", bytes / double(1 << 20)); }

// One line per rank: the peak of the buffers the trainer holds and its mix.
void print_memory(const std::vector<RankMemoryMeasured>& memory) {
  std::cout << "peak memory per rank, MiB (the trainer's buffers at their peak: parameters + gradients + optimizer + "
               "activations + workspace):\n";
  for (const RankMemoryMeasured& m : memory) {
    const MemoryBytes& at = m.at_total_peak_bytes;
    std::cout << fmt::format("  rank {}: {} = {} + {} + {} + {} + {}; process peak {}{}\n", m.rank,
                             mebibytes(m.total_peak_bytes), mebibytes(at[0]), mebibytes(at[1]), mebibytes(at[2]),
                             mebibytes(at[3]), mebibytes(at[4]), mebibytes(m.process_peak_bytes),
                             m.device_peak_bytes > 0 ? "; device peak " + mebibytes(m.device_peak_bytes) : "");
  }
}

void print_step(const RunArgs& args, const executor::StepStats& stats) {
  // The bar shares stdout with the step lines, so mpirun forwards them in order.
  if (args.progress) std::cout << fmt::format("\r{:80}\r", "");  // the bar gives way to the step line
  // MoE: `loss` is the cross-entropy (as for a dense model, and as the runs database
  // records it); the step trained on it plus the auxiliary load-balancing loss, shown apart.
  const std::string aux = stats.aux_loss > 0 ? fmt::format(" + moe aux {:.6f}", stats.aux_loss) : "";
  std::cout << fmt::format("step {} loss {:.6f}{}  {:.0f} tokens/s  step {:.3f} s\n", stats.step, stats.loss, aux,
                           stats.tokens_per_s, stats.seconds)
            << std::flush;
  if (args.progress && stats.step < args.steps) {
    constexpr int kWidth = 30;
    const int filled = kWidth * stats.step / args.steps;
    std::cout << fmt::format("training [{}{}] {}/{} steps  about {:.0f} s left", std::string(filled, '#'),
                             std::string(kWidth - filled, '.'), stats.step, args.steps,
                             stats.seconds * (args.steps - stats.step))
              << std::flush;
  }
}

// Trains until --steps or a stop signal; returns the signal (0: all steps ran).
int train_steps(const RunArgs& args, executor::Trainer& trainer, executor::Communicator& world, RunRecorder& record) {
  const bool reporter = world.rank() == 0;
  // Fault injection for the failure tests: TESSEL_FAIL_AT=<rank>:<step> makes that
  // rank raise an error before that step.
  int fail_rank = -1, fail_step = -1;
  if (const char* spec = std::getenv("TESSEL_FAIL_AT")) std::sscanf(spec, "%d:%d", &fail_rank, &fail_step);
  int saved_step = -1;
  while (trainer.steps_done() < args.steps) {
    if (world.rank() == fail_rank && trainer.steps_done() + 1 == fail_step) {
      throw Error(fmt::format("injected failure before step {} (TESSEL_FAIL_AT)", fail_step));
    }
    const executor::StepStats stats = trainer.step();
    if (reporter) print_step(args, stats);
    record.step(stats);
    if (!std::isfinite(stats.loss)) {
      record.end("failed", fmt::format("step {}: loss is not finite", stats.step));
      throw Error(fmt::format("step {}: loss is not finite; stopping (the last checkpoint is kept)", stats.step));
    }
    const int stop = agreed_stop_signal(world);
    const bool periodic = args.checkpoint_every > 0 && stats.step % args.checkpoint_every == 0;
    if (!args.checkpoint.empty() && (periodic || stop != 0 || stats.step == args.steps)) {
      trainer.save(args.checkpoint);
      saved_step = stats.step;
      if (reporter && (stop != 0 || stats.step == args.steps)) {
        std::cout << fmt::format("checkpoint at step {} in {}\n", trainer.steps_done(), args.checkpoint) << std::flush;
      }
    }
    if (stop != 0) return stop;
  }
  // Resumed at the last step already (nothing trained): --checkpoint still gets it.
  if (!args.checkpoint.empty() && saved_step != trainer.steps_done()) {
    trainer.save(args.checkpoint);
    if (reporter) std::cout << fmt::format("checkpoint at step {} in {}\n", trainer.steps_done(), args.checkpoint);
  }
  return 0;
}

int train(const RunArgs& args, const Plan& plan) {
  executor::Communicator& world = executor::mpi_world();
  const bool reporter = world.rank() == 0;
  RunRecorder record;
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
            : executor::DataLoader(executor::open_token_source(args.data_file, args.data_format, args.data_dtype),
                                   plan.train.global_batch, plan.seq_len(), dp_rank, dp, plan.model.vocab);
    executor::TrainerOptions options;
    options.seed = args.seed;
    options.lr = args.lr;
    options.clip_grad_norm = args.clip_grad_norm;
    options.device_memory_bytes = std::size_t(args.device_memory_bytes);
    executor::Trainer trainer(plan, grid, std::move(loader), options, *device.backend);
    if (!args.resume.empty()) {
      trainer.load(args.resume, args.steps);
      if (reporter) std::cout << fmt::format("resumed from step {} ({})\n", trainer.steps_done(), args.resume);
    }
    if (!args.init_file.empty()) {
      // Every rank checks the file, reads the whole tensors its buckets hold and cuts its
      // shards from them.
      std::set<std::string> needed;
      for (const executor::Bucket& b : executor::rank_buckets(plan, world.rank())) {
        for (const executor::TensorSlot& t : b.tensors) needed.insert(t.name);
      }
      const executor::SafetensorsFile weights = executor::SafetensorsFile::read(args.init_file, "--init");
      trainer.set_whole_parameters(executor::whole_model_from_hf(weights, plan.model, &needed));
      if (reporter) std::cout << fmt::format("initial weights from {}\n", args.init_file) << std::flush;
    }
    if (reporter) {
      record.begin(args, plan, device.owned_backend ? "cuda" : "cpu");
      std::cout << fmt::format("run {}: {} on {} {} ranks ({}), {} steps\n", record.id, plan.model.name, world.size(),
                               device.owned_backend ? "GPU" : "CPU", plan.parallel.summary(), args.steps)
                << std::flush;
    }
    const int stopped_by = train_steps(args, trainer, world, record);
    if (stopped_by != 0) {
      const std::string why = fmt::format("stopped by {} after step {}",
                                          stopped_by == SIGUSR1 ? "tessel run (it was signalled)" : signal_name(stopped_by),
                                          trainer.steps_done());
      record.end("interrupted", why);
      if (reporter) std::cerr << "tessel: " << why << "\n" << std::flush;
      world.barrier();
      // Asked by tessel run, which reports the signal it got; a signal of its own the
      // rank reports in its exit status.
      return stopped_by == SIGUSR1 ? 0 : 128 + stopped_by;
    }
    if (plan.parallel.offload != OffloadMode::none && reporter) {
      const executor::OffloadStats o = trainer.offload_stats();
      std::cout << fmt::format("offload (rank 0): {:.0f} bytes host to device and {:.0f} device to host per step; device "
                               "pool peak {} of {} bytes (non-model {})\n",
                               o.host_to_device_bytes, o.device_to_host_bytes, o.peak_bytes, o.budget_bytes,
                               o.peak_non_model_bytes)
                << std::flush;
    }
    const std::vector<std::string> events_per_rank = gather_events_text(world, events_text(trainer.timeline().take()));
    const std::vector<RankMemoryMeasured> memory = gather_memory(world, trainer, *device.backend);
    if (reporter) {
      const Program program = Program::lower(plan);
      const std::vector<profiles::EventRecord> events = parse_events(events_per_rank, program);
      record.runs->add_events(record.id, events);
      if (!args.trace_file.empty()) {
        write_text_file_atomically(args.trace_file, chrome_trace_json(program, profiles::timed_ops(events)));
        std::cout << fmt::format("wrote {} measured events to {}\n", events.size(), args.trace_file);
      }
      for (const RankMemoryMeasured& m : memory) record.runs->set_rank_memory(record.id, m);
      print_memory(memory);
      record.end("finished", "");
      std::cout << fmt::format("wrote run {} to {}\n", record.id, record.store->path());
    }
    world.barrier();
    return 0;
  } catch (const Error& error) {
    record.end("failed", error.what());
    std::fprintf(stderr, "tessel: error: rank %d: %s\n", world.rank(), error.what());
    std::fflush(stderr);
    executor::abort_all_ranks(2);
  } catch (const std::bad_alloc&) {
    const std::string message = out_of_memory_message();
    record.end("failed", message);
    std::fprintf(stderr, "tessel: error: rank %d: %s\n", world.rank(), message.c_str());
    std::fflush(stderr);
    executor::abort_all_ranks(2);
  }
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) {
  using namespace tessel;
  try {
    stop_with_the_launcher();
    const RunArgs args = RunArgs::from_arguments(argc, argv);
    // First thing, before MPI starts: the launcher's watch counts a rank from its first beat.
    if (!args.heartbeat_dir.empty()) {
      const executor::LaunchedRank launched = executor::read_launched_rank(executor::process_environment());
      executor::start_heartbeat(args.heartbeat_dir, launched.rank.value_or(0));
    }
    const Plan plan = Plan::load(args.plan_file);
    return train(args, plan);
  } catch (const Error& error) {
    std::fprintf(stderr, "tessel: error: %s\n", error.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tessel: error: %s\n", out_of_memory_message().c_str());
    return 2;
  }
}
