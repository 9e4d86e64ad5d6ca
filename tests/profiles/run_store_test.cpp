// Runs in the profile database: a version-1 file (profiles only) migrates to version 2
// keeping its profiles, and a run's plan, steps, events and memory round-trip.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "tessel/core/error.hpp"
#include "tessel/profiles/run_store.hpp"

using namespace tessel;
using namespace tessel::profiles;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir() { return fs::temp_directory_path() / ("tessel_runs_" + std::to_string(::getpid())); }
std::string temp_db(const char* name) {
  fs::create_directories(temp_dir());
  const fs::path path = temp_dir() / name;
  fs::remove(path);
  return path.string();
}
// Whether `sql` ran on the database file `path` (to turn it back into what an older
// version wrote); when not, SQLite's message.
::testing::AssertionResult run_sql(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return ::testing::AssertionFailure() << "cannot open " << path;
  char* message = nullptr;
  const int status = sqlite3_exec(db, sql, nullptr, nullptr, &message);
  const std::string why = message ? message : "";
  sqlite3_free(message);
  sqlite3_close(db);
  if (status != SQLITE_OK) return ::testing::AssertionFailure() << why;
  return ::testing::AssertionSuccess();
}

// The folder goes when the suite ends: tests leave nothing in /tmp.
class RunStoreFiles : public ::testing::Environment {
 public:
  void TearDown() override { fs::remove_all(temp_dir()); }
};
const auto* const kCleanUp = ::testing::AddGlobalTestEnvironment(new RunStoreFiles);
}  // namespace

TEST(RunStore, VersionOneFilesMigrateAndKeepTheirProfiles) {
  const std::string path = temp_db("v1.db");
  {
    ProfileStore store(path);
    store.put_profile(shipped_profile("local-cpu"));
  }
  // Turn the file back into what version 1 wrote: no run tables, user_version 1.
  ASSERT_TRUE(run_sql(path, "DROP TABLE run_memory_parts; DROP TABLE run_events; DROP TABLE run_steps; DROP TABLE run_memory; "
                          "DROP TABLE runs; ALTER TABLE devices DROP COLUMN peak_fp8_flops_per_s; PRAGMA user_version=1;"));
  ProfileStore store(path);
  EXPECT_EQ(store.schema_version(), ProfileStore::kSchemaVersion);
  EXPECT_EQ(store.kernel_sample_count("local-cpu"), shipped_profile("local-cpu").kernels.size());
  RunStore runs(store);
  EXPECT_TRUE(runs.runs().empty());
  EXPECT_GT(runs.begin_run(Json{{"note", "after migration"}}, "cpu", 1), 0);
}

// Version 4 (fp8): a device's fp8 peak and fp8 GEMM samples are kept; older files gain
// the column, 0 (no fp8) for the devices they hold.
TEST(RunStore, VersionThreeFilesMigrateAndKeepFp8Profiles) {
  const std::string path = temp_db("v3.db");
  {
    ProfileStore store(path);
    store.put_profile(shipped_profile("A100-SXM-80GB"));
  }
  ASSERT_TRUE(run_sql(path, "DROP TABLE run_memory_parts; ALTER TABLE devices DROP COLUMN peak_fp8_flops_per_s; PRAGMA user_version=3;"));
  ProfileStore store(path);
  EXPECT_EQ(store.schema_version(), ProfileStore::kSchemaVersion);
  EXPECT_FALSE(store.load("A100-SXM-80GB")->device.has_fp8());
  const Profile h100 = shipped_profile("H100-SXM");
  store.put_profile(h100);
  const Profile loaded = *store.load("H100-SXM");
  EXPECT_DOUBLE_EQ(loaded.device.peak_fp8_flops_per_s, 1979e12);
  EXPECT_EQ(std::count_if(loaded.kernels.begin(), loaded.kernels.end(),
                          [](const KernelSample& s) { return s.precision == "fp8"; }),
            8);
}

TEST(RunStore, RunsRoundTrip) {
  const std::string path = temp_db("runs.db");
  ProfileStore store(path);
  RunStore runs(store);
  const Json plan{{"model", "gpt2-124m"}, {"parallel", {{"dp", 2}}}};
  const std::int64_t id = runs.begin_run(plan, "cpu", 3);
  const std::vector<StepRecord> steps{{1, 5.5, 0.25, 4096}, {2, 5.1, 0.24, 4200}, {3, 4.8, 0.24, 4210}};
  runs.add_steps(id, steps);
  const std::vector<EventRecord> events{{1, 0, "compute", "mb0/L0/fwd/attn.qkv", 0.001, 0.002},
                                        {1, 1, "tp_comm", "mb0/L0/fwd/attn.tp_all_reduce", 0.002, 0.0025}};
  runs.add_events(id, events);
  runs.set_peak_memory(id, 0, 1.5e9);
  runs.set_peak_memory(id, 1, 1.4e9);
  runs.finish(id, "finished");
  const auto record = runs.run(id);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->plan, plan);
  EXPECT_EQ(record->status, "finished");
  EXPECT_EQ(record->steps, 3);
  EXPECT_EQ(runs.steps(id), steps);
  EXPECT_EQ(runs.events(id), events);
  EXPECT_EQ(runs.peak_memory(id), (std::vector<std::pair<int, double>>{{0, 1.5e9}, {1, 1.4e9}}));
  EXPECT_EQ(record->completed_steps, 3);
  EXPECT_THROW(runs.finish(id, "exploded"), Error);
  EXPECT_FALSE(runs.run(id + 100).has_value());
}

// Version 2 allowed only running|finished|failed: its runs survive the rebuild of the
// table, and a run stopped by a signal is recorded as interrupted with its steps.
TEST(RunStore, VersionTwoFilesMigrateAndRecordInterruptedRuns) {
  const std::string path = temp_db("v2.db");
  std::int64_t old_run = 0;
  {
    ProfileStore store(path);
    RunStore runs(store);
    old_run = runs.begin_run(Json{{"note", "v2"}}, "cpu", 4);
    runs.add_steps(old_run, {{1, 5.5, 0.25, 4096}});
  }
  ASSERT_TRUE(run_sql(path, "PRAGMA foreign_keys=OFF; DROP TABLE run_memory_parts; "
                          "CREATE TABLE runs_v2 AS SELECT * FROM runs; DROP TABLE runs; "
                          "CREATE TABLE runs(id INTEGER PRIMARY KEY, created TEXT NOT NULL, host TEXT NOT NULL, "
                          "tool_version TEXT NOT NULL, plan TEXT NOT NULL, backend TEXT NOT NULL, steps INTEGER NOT NULL, "
                          "status TEXT NOT NULL CHECK(status IN ('running', 'finished', 'failed')), message TEXT NOT NULL); "
                          "INSERT INTO runs SELECT * FROM runs_v2; DROP TABLE runs_v2; "
                          "ALTER TABLE devices DROP COLUMN peak_fp8_flops_per_s; PRAGMA user_version=2;"));
  ProfileStore store(path);
  EXPECT_EQ(store.schema_version(), ProfileStore::kSchemaVersion);
  RunStore runs(store);
  runs.finish(old_run, "interrupted", "stopped by SIGTERM after 1 of 4 steps");
  const auto record = runs.run(old_run);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, "interrupted");
  EXPECT_EQ(record->completed_steps, 1);
  EXPECT_EQ(record->steps, 4);
  EXPECT_EQ(runs.steps(old_run).size(), 1u);
}

// Version 5 adds each rank's memory by category: a version-4 file's runs keep their
// process peaks (read back without categories), and new runs record the categories.
TEST(RunStore, VersionFourFilesMigrateAndRecordMemoryByCategory) {
  const std::string path = temp_db("v4.db");
  std::int64_t old_run = 0;
  {
    ProfileStore store(path);
    RunStore runs(store);
    old_run = runs.begin_run(Json{{"note", "v3"}}, "cpu", 2);
    runs.set_peak_memory(old_run, 0, 2.5e8);
    runs.finish(old_run, "finished");
  }
  ASSERT_TRUE(run_sql(path, "DROP TABLE run_memory_parts; PRAGMA user_version=4;"));
  {
    // Read only, a version-4 file is refused with the way out (a writing command migrates it).
    EXPECT_THROW(ProfileStore(path, ProfileStore::Access::read_only), Error);
  }
  ProfileStore store(path);
  EXPECT_EQ(store.schema_version(), ProfileStore::kSchemaVersion);
  RunStore runs(store);
  const std::vector<RankMemoryMeasured> old_memory = runs.rank_memory(old_run);
  ASSERT_EQ(old_memory.size(), 1u);
  EXPECT_FALSE(old_memory[0].by_category);
  EXPECT_EQ(old_memory[0].process_peak_bytes, 2.5e8);
  EXPECT_EQ(runs.run(old_run)->status, "finished");

  const std::int64_t id = runs.begin_run(Json{{"note", "v4"}}, "cpu", 1);
  RankMemoryMeasured m;
  m.rank = 1;
  m.peak_bytes = {400, 400, 800, 300, 120};
  m.at_total_peak_bytes = {400, 400, 800, 250, 100};
  m.total_peak_bytes = 1950;
  m.device_peak_bytes = 4096;
  m.process_peak_bytes = 1e8;
  m.host_state_bytes = 7e6;
  runs.set_rank_memory(id, m);
  const std::vector<RankMemoryMeasured> back = runs.rank_memory(id);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(back[0].by_category);
  EXPECT_EQ(back[0].rank, 1);
  EXPECT_EQ(back[0].peak_bytes, m.peak_bytes);
  EXPECT_EQ(back[0].at_total_peak_bytes, m.at_total_peak_bytes);
  EXPECT_EQ(back[0].total_peak_bytes, 1950);
  EXPECT_EQ(back[0].device_peak_bytes, 4096);
  EXPECT_EQ(back[0].process_peak_bytes, 1e8);
  EXPECT_EQ(back[0].host_state_bytes, 7e6);
  EXPECT_EQ(runs.peak_memory(id), (std::vector<std::pair<int, double>>{{1, 1e8}}));
}

// A run still "running" names its launcher (pid and host): gone from this host, or its
// pid now another program's, the run is read as failed and recorded so; a launcher on
// another host cannot be asked, and a live one keeps its run running (issue 38).
TEST(RunStore, ARunWhoseLauncherIsGoneFromThisHostIsReadAsFailed) {
  const std::string path = temp_db("abandoned.db");
  ProfileStore store(path);
  RunStore runs(store);
  const std::string here = host_name();
  // A pid no process has: past the kernel's pid_max.
  const std::int64_t gone = runs.begin_run(Json{{"note", "gone"}}, "cpu", 9, "running under tessel run 99999999 on " + here);
  // This test's own pid: alive, but not a tessel process.
  const std::int64_t reused =
      runs.begin_run(Json{{"note", "reused"}}, "cpu", 9, "running under tessel run " + std::to_string(::getpid()) + " on " + here);
  const std::int64_t elsewhere =
      runs.begin_run(Json{{"note", "elsewhere"}}, "cpu", 9, "running under tessel run 99999999 on another-host-" + here);
  runs.add_steps(gone, {{1, 5.0, 0.1, 100}, {2, 4.0, 0.1, 100}});
  EXPECT_EQ(runs.run(gone)->status, "failed");
  EXPECT_EQ(runs.run(gone)->message,
            "tessel run 99999999 on " + here + " ended without recording how the run ended (killed?) after 2 of 9 steps");
  EXPECT_EQ(runs.run(reused)->status, "failed");
  EXPECT_EQ(runs.run(elsewhere)->status, "running");
  // Recorded: a reader that may not write sees the same.
  ProfileStore reader(path, ProfileStore::Access::read_only);
  EXPECT_EQ(RunStore(reader).run(gone)->status, "failed");
}
