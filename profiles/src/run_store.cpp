// RunStore (run_store.hpp): runs, their steps, measured events and memory, in the
// profile database's tables (store_schema.hpp).
#include "tessel/profiles/run_store.hpp"

#include <fstream>
#include <map>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "sqlite_statement.hpp"
#include "tessel/core/error.hpp"

namespace tessel::profiles {

std::int64_t RunStore::begin_run(const Json& plan, const std::string& backend, int steps, const std::string& launch_key) {
  std::int64_t id = 0;
  in_transaction(store_.db_, store_.path_, [&] {
    Statement insert(store_.db_,
                     "INSERT INTO runs(created, host, tool_version, plan, backend, steps, status, message) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7)",
                     store_.path_);
    insert.bind(1, std::string_view(today_utc())).bind(2, std::string_view(host_name()));
    insert.bind(3, std::string_view(tool_version())).bind(4, std::string_view(plan.dump()));
    insert.bind(5, std::string_view(backend)).bind(6, steps).bind(7, std::string_view(launch_key));
    insert.run_and_reset();
    id = sqlite3_last_insert_rowid(store_.db_);
  });
  return id;
}

void RunStore::add_steps(std::int64_t run, const std::vector<StepRecord>& steps) {
  in_transaction(store_.db_, store_.path_, [&] {
    Statement insert(store_.db_, "INSERT OR REPLACE INTO run_steps VALUES (?1, ?2, ?3, ?4, ?5)", store_.path_);
    for (const StepRecord& s : steps) {
      insert.bind(1, run).bind(2, s.step).bind(3, s.loss).bind(4, s.seconds).bind(5, s.tokens_per_s);
      insert.run_and_reset();
    }
  });
}

void RunStore::add_events(std::int64_t run, const std::vector<EventRecord>& events) {
  in_transaction(store_.db_, store_.path_, [&] {
    Statement insert(store_.db_, "INSERT INTO run_events VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", store_.path_);
    for (const EventRecord& e : events) {
      insert.bind(1, run).bind(2, e.step).bind(3, e.rank).bind(4, std::string_view(e.stream));
      insert.bind(5, std::string_view(e.op)).bind(6, e.start_s).bind(7, e.end_s);
      insert.run_and_reset();
    }
  });
}

void RunStore::set_peak_memory(std::int64_t run, int rank, double bytes) {
  in_transaction(store_.db_, store_.path_, [&] {
    Statement insert(store_.db_, "INSERT OR REPLACE INTO run_memory VALUES (?1, ?2, ?3)", store_.path_);
    insert.bind(1, run).bind(2, rank).bind(3, bytes);
    insert.run_and_reset();
  });
}

void RunStore::set_rank_memory(std::int64_t run, const RankMemoryMeasured& m) {
  in_transaction(store_.db_, store_.path_, [&] {
    Statement process(store_.db_, "INSERT OR REPLACE INTO run_memory VALUES (?1, ?2, ?3)", store_.path_);
    process.bind(1, run).bind(2, m.rank).bind(3, m.process_peak_bytes);
    process.run_and_reset();
    Statement part(store_.db_, "INSERT OR REPLACE INTO run_memory_parts VALUES (?1, ?2, ?3, ?4, ?5)", store_.path_);
    auto put = [&](std::string_view category, double peak, double at_total_peak) {
      part.bind(1, run).bind(2, m.rank).bind(3, category).bind(4, peak).bind(5, at_total_peak);
      part.run_and_reset();
    };
    for (std::size_t c = 0; c < kMemoryCategories; ++c) {
      put(to_string(MemoryCategory(c)), m.peak_bytes[c], m.at_total_peak_bytes[c]);
    }
    put("total", m.total_peak_bytes, m.total_peak_bytes);
    if (m.device_peak_bytes > 0) put("device", m.device_peak_bytes, m.device_peak_bytes);
    if (m.host_state_bytes > 0) put("host", m.host_state_bytes, m.host_state_bytes);
  });
}

void RunStore::finish(std::int64_t run, const std::string& status, const std::string& message) {
  if (status != "finished" && status != "failed" && status != "interrupted") {
    throw Error(fmt::format("run status must be finished|failed|interrupted, got '{}'", status));
  }
  in_transaction(store_.db_, store_.path_, [&] {
    Statement update(store_.db_, "UPDATE runs SET status = ?1, message = ?2 WHERE id = ?3", store_.path_);
    update.bind(1, std::string_view(status)).bind(2, std::string_view(message)).bind(3, run);
    update.run_and_reset();
  });
}

// The steps a run recorded (rank 0 records each as it ends, so a run that failed or was
// interrupted keeps the ones it completed).
constexpr const char* kSelectRuns = "SELECT *, (SELECT COUNT(*) FROM run_steps WHERE run_steps.run = runs.id) FROM runs";

int RunStore::finish_left_running(const std::string& launch_key, const std::string& status, const std::string& why) {
  if (launch_key.empty()) return 0;
  int count = 0;
  for (const RunRecord& r : runs()) {
    if (r.status != "running" || r.message != launch_key) continue;
    finish(r.id, status, fmt::format("{} after {} of {} steps", why, r.completed_steps, r.steps));
    ++count;
  }
  return count;
}

namespace {
RunRecord read_run(const Statement& row) {
  RunRecord r;
  r.id = row.integer(0);
  r.created = row.text(1);
  r.host = row.text(2);
  r.tool_version = row.text(3);
  r.plan = Json::parse(row.text(4));
  r.backend = row.text(5);
  r.steps = int(row.integer(6));
  r.status = row.text(7);
  r.message = row.text(8);
  r.completed_steps = int(row.integer(9));
  return r;
}

// The process a running run's launch key names: "running under PROCESS PID on HOST".
struct LaunchKey {
  std::string process, host;
  long pid = 0;
};
std::optional<LaunchKey> parse_launch_key(const std::string& message) {
  constexpr std::string_view kPrefix = "running under ";
  const std::size_t on = message.rfind(" on ");
  if (!message.starts_with(kPrefix) || on == std::string::npos) return std::nullopt;
  const std::string who = message.substr(kPrefix.size(), on - kPrefix.size());
  const std::size_t space = who.rfind(' ');
  if (space == std::string::npos) return std::nullopt;
  LaunchKey key;
  key.process = who.substr(0, space) == "tessel run" ? "tessel" : who.substr(0, space);
  key.host = message.substr(on + 4);
  try {
    std::size_t used = 0;
    key.pid = std::stol(who.substr(space + 1), &used);
    if (used != who.size() - space - 1 || key.pid <= 0) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return key;
}

// Whether the key's process still runs: on this host, its pid names a process of that
// name (a pid reused by another program does not count). Other hosts: unknown, so yes.
bool launcher_alive(const LaunchKey& key) {
  if (key.host != host_name()) return true;
  std::ifstream comm(fmt::format("/proc/{}/comm", key.pid));
  std::string name;
  return std::getline(comm, name) && name == key.process;
}
}  // namespace

void RunStore::settle_if_abandoned(RunRecord& record) const {
  if (record.status != "running") return;
  const auto key = parse_launch_key(record.message);
  if (!key || launcher_alive(*key)) return;
  record.status = "failed";
  record.message = fmt::format("{} {} on {} ended without recording how the run ended (killed?) after {} of {} steps",
                               key->process == "tessel" ? "tessel run" : key->process, key->pid, key->host,
                               record.completed_steps, record.steps);
  if (sqlite3_db_readonly(store_.db_, "main") == 1) return;  // shown as failed, recorded by a command that may write
  in_transaction(store_.db_, store_.path_, [&] {
    Statement update(store_.db_, "UPDATE runs SET status = ?1, message = ?2 WHERE id = ?3 AND status = 'running'",
                     store_.path_);
    update.bind(1, std::string_view(record.status)).bind(2, std::string_view(record.message)).bind(3, record.id);
    update.run_and_reset();
  });
}

std::vector<RunRecord> RunStore::runs() const {
  std::vector<RunRecord> out;
  {
    Statement query(store_.db_, std::string(kSelectRuns) + " ORDER BY id", store_.path_);
    while (query.step()) out.push_back(read_run(query));
  }
  for (RunRecord& record : out) settle_if_abandoned(record);
  return out;
}

std::optional<RunRecord> RunStore::run(std::int64_t id) const {
  std::optional<RunRecord> record;
  {
    Statement query(store_.db_, std::string(kSelectRuns) + " WHERE id = ?1", store_.path_);
    query.bind(1, id);
    if (query.step()) record = read_run(query);
  }
  if (record) settle_if_abandoned(*record);
  return record;
}

std::vector<StepRecord> RunStore::steps(std::int64_t run) const {
  std::vector<StepRecord> out;
  Statement query(store_.db_, "SELECT step, loss, seconds, tokens_per_s FROM run_steps WHERE run = ?1 ORDER BY step",
                  store_.path_);
  query.bind(1, run);
  while (query.step()) out.push_back({int(query.integer(0)), query.real(1), query.real(2), query.real(3)});
  return out;
}

std::vector<EventRecord> RunStore::events(std::int64_t run) const {
  std::vector<EventRecord> out;
  Statement query(store_.db_,
                  "SELECT step, rank, stream, op, start_s, end_s FROM run_events WHERE run = ?1 ORDER BY rowid",
                  store_.path_);
  query.bind(1, run);
  while (query.step()) {
    out.push_back({int(query.integer(0)), int(query.integer(1)), query.text(2), query.text(3), query.real(4),
                   query.real(5)});
  }
  return out;
}

std::vector<std::pair<int, double>> RunStore::peak_memory(std::int64_t run) const {
  std::vector<std::pair<int, double>> out;
  Statement query(store_.db_, "SELECT rank, peak_bytes FROM run_memory WHERE run = ?1 ORDER BY rank", store_.path_);
  query.bind(1, run);
  while (query.step()) out.emplace_back(int(query.integer(0)), query.real(1));
  return out;
}

std::vector<RankMemoryMeasured> RunStore::rank_memory(std::int64_t run) const {
  std::map<int, RankMemoryMeasured> by_rank;
  for (const auto& [rank, bytes] : peak_memory(run)) {
    by_rank[rank].rank = rank;
    by_rank[rank].process_peak_bytes = bytes;
  }
  Statement query(store_.db_, "SELECT rank, category, peak_bytes, at_total_peak_bytes FROM run_memory_parts WHERE run = ?1",
                  store_.path_);
  query.bind(1, run);
  while (query.step()) {
    RankMemoryMeasured& m = by_rank[int(query.integer(0))];
    m.rank = int(query.integer(0));
    m.by_category = true;
    const std::string category = query.text(1);
    if (category == "total") m.total_peak_bytes = query.real(2);
    else if (category == "device") m.device_peak_bytes = query.real(2);
    else if (category == "host") m.host_state_bytes = query.real(2);
    else if (const auto c = memory_category_from_string(category)) {
      m.peak_bytes[std::size_t(*c)] = query.real(2);
      m.at_total_peak_bytes[std::size_t(*c)] = query.real(3);
    }
  }
  std::vector<RankMemoryMeasured> out;
  for (auto& [rank, m] : by_rank) out.push_back(m);
  return out;
}

std::vector<TimedOp> timed_ops(const std::vector<EventRecord>& events) {
  std::vector<TimedOp> out;
  out.reserve(events.size());
  for (const EventRecord& e : events) {
    out.push_back({e.rank, stream_from_string(e.stream).value_or(Stream::compute), e.op, e.start_s, e.end_s});
  }
  return out;
}

std::vector<std::vector<TimedOp>> timed_ops_by_step(const std::vector<EventRecord>& events) {
  std::map<int, std::vector<TimedOp>> by_step;
  for (const EventRecord& e : events) {
    by_step[e.step].push_back({e.rank, stream_from_string(e.stream).value_or(Stream::compute), e.op, e.start_s, e.end_s});
  }
  std::vector<std::vector<TimedOp>> out;
  out.reserve(by_step.size());
  for (auto& [step, ops] : by_step) out.push_back(std::move(ops));
  return out;
}

}  // namespace tessel::profiles
