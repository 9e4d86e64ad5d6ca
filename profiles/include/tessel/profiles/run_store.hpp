// Training runs in the same database as the profiles: the plan, one row per step (loss,
// time, throughput), every measured op event with the Program's op id, and peak memory
// per rank. The executor writes them; `compare` and the GUI read them next to the
// prediction for the same plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/chrome_trace.hpp"
#include "tessel/core/json_fields.hpp"
#include "tessel/core/memory_comparison.hpp"
#include "tessel/profiles/profile_store.hpp"

namespace tessel::profiles {

struct RunRecord {
  std::int64_t id = 0;
  std::string created, host, tool_version, backend, status, message;
  Json plan;
  int steps = 0;            // asked for
  int completed_steps = 0;  // recorded: all of them, or those before a failure or an interruption
};

struct StepRecord {
  int step = 0;
  double loss = 0, seconds = 0, tokens_per_s = 0;
  bool operator==(const StepRecord&) const = default;
};

struct EventRecord {
  int step = 0, rank = 0;
  std::string stream, op;
  double start_s = 0, end_s = 0;
  bool operator==(const EventRecord&) const = default;
};

// Measured events as the timed ops a Chrome trace or a comparison takes; the ids view
// `events`, which must outlive the result. A stream the Program does not name
// ("unknown") reads as compute.
std::vector<TimedOp> timed_ops(const std::vector<EventRecord>& events);
// The same, one list per measured step, in step order.
std::vector<std::vector<TimedOp>> timed_ops_by_step(const std::vector<EventRecord>& events);

class RunStore {
 public:
  explicit RunStore(ProfileStore& store) : store_(store) {}

  // A new run in state "running" (its message: `launch_key` until it ends); returns its id.
  std::int64_t begin_run(const Json& plan, const std::string& backend, int steps, const std::string& launch_key = "");
  void add_steps(std::int64_t run, const std::vector<StepRecord>& steps);
  void add_events(std::int64_t run, const std::vector<EventRecord>& events);
  void set_peak_memory(std::int64_t run, int rank, double bytes);
  // One rank's memory by category and its peaks (process_peak_bytes goes to
  // set_peak_memory's table).
  void set_rank_memory(std::int64_t run, const RankMemoryMeasured& memory);
  // status: finished | failed | interrupted (stopped by a signal).
  void finish(std::int64_t run, const std::string& status, const std::string& message = "");
  // Ends the runs still "running" under `launch_key` (ranks killed before they could say)
  // with `status` and a message that counts their recorded steps; returns how many.
  int finish_left_running(const std::string& launch_key, const std::string& status, const std::string& why);

  // A run still "running" whose launcher (named by its launch key) is gone from this
  // host is read as failed, and recorded so when the database may be written: a launcher
  // killed outright cannot say how its run ended.
  std::vector<RunRecord> runs() const;
  std::optional<RunRecord> run(std::int64_t id) const;
  std::vector<StepRecord> steps(std::int64_t run) const;
  std::vector<EventRecord> events(std::int64_t run) const;
  std::vector<std::pair<int, double>> peak_memory(std::int64_t run) const;
  // Every rank that recorded memory, in rank order; by_category is false for runs
  // recorded before version 4 (the process peak only).
  std::vector<RankMemoryMeasured> rank_memory(std::int64_t run) const;

 private:
  void settle_if_abandoned(RunRecord& record) const;
  ProfileStore& store_;
};

}  // namespace tessel::profiles
