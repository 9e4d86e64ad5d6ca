// Runs in the profile database: a version-1 file (profiles only) migrates to version 2
// keeping its profiles, and a run's plan, steps, events and memory round-trip.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "tessel/core/error.hpp"
#include "tessel/profiles/run_store.hpp"

using namespace tessel;
using namespace tessel::profiles;
namespace fs = std::filesystem;

namespace {
std::string temp_db(const char* name) {
  const fs::path dir = fs::temp_directory_path() / ("tessel_runs_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path path = dir / name;
  fs::remove(path);
  return path.string();
}
}  // namespace

TEST(RunStore, VersionOneFilesMigrateAndKeepTheirProfiles) {
  const std::string path = temp_db("v1.db");
  {
    ProfileStore store(path);
    store.put_profile(shipped_profile("local-cpu"));
  }
  // Turn the file back into what version 1 wrote: no run tables, user_version 1.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP TABLE run_events; DROP TABLE run_steps; DROP TABLE run_memory; DROP TABLE runs; "
                         "PRAGMA user_version=1;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  ProfileStore store(path);
  EXPECT_EQ(store.schema_version(), 2);
  EXPECT_EQ(store.kernel_sample_count("local-cpu"), shipped_profile("local-cpu").kernels.size());
  RunStore runs(store);
  EXPECT_TRUE(runs.runs().empty());
  EXPECT_GT(runs.begin_run(Json{{"note", "after migration"}}, "cpu", 1), 0);
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
  EXPECT_THROW(runs.finish(id, "exploded"), Error);
  EXPECT_FALSE(runs.run(id + 100).has_value());
}
