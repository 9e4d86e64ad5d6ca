// The profile database: round trip, migration of an empty file, refusal of foreign
// and corrupted files (left untouched), concurrent writers, JSON import/export.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/error_of.hpp"
#include "support/scratch_folder.hpp"
#include "tessel/core/error.hpp"
#include "tessel/profiles/profile_store.hpp"

using namespace tessel;
using namespace tessel::profiles;
using namespace tessel::test;
namespace fs = std::filesystem;

namespace {
class Store : public ScratchFolderTest {};

KernelSample gemm(const std::string& device, int size, double seconds) {
  KernelSample s = KernelSample::gemm(device, "fp32", size, size, size);
  s.seconds = seconds;
  s.spread = 0.03;
  s.host = "test";
  s.date = "2026-11-21";
  s.tool_version = tool_version();
  return s;
}
}  // namespace

TEST_F(Store, RoundTripsAShippedProfile) {
  const Profile shipped = shipped_profile("H100-SXM");
  {
    ProfileStore store(path("a.db"));
    EXPECT_EQ(store.schema_version(), ProfileStore::kSchemaVersion);
    store.put_profile(shipped);
  }
  ProfileStore reopened(path("a.db"), ProfileStore::Access::read_only);
  EXPECT_EQ(reopened.devices(), std::vector<std::string>{"H100-SXM"});
  const auto loaded = reopened.load("H100-SXM");
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->device, shipped.device);
  EXPECT_EQ(loaded->kernels, shipped.kernels);
  EXPECT_EQ(loaded->meta, shipped.meta);
  EXPECT_EQ(Profile::from_json(loaded->to_json()), *loaded);
  EXPECT_FALSE(reopened.load("nonexistent").has_value());
}

TEST_F(Store, MigratesAnEmptyFile) {
  std::ofstream(path("empty.db")).close();
  ASSERT_EQ(fs::file_size(path("empty.db")), 0u);
  ProfileStore store(path("empty.db"));
  EXPECT_EQ(store.schema_version(), ProfileStore::kSchemaVersion);
  store.put_profile(shipped_profile("local-cpu"));
  EXPECT_EQ(store.devices().size(), 1u);
}

TEST_F(Store, RefusesForeignAndCorruptedFilesWithoutTouchingThem) {
  {
    std::ofstream out(path("text.db"));
    out << "this is not a database, it is a grocery list\n";
  }
  const std::string text_before = read_file(path("text.db"));
  EXPECT_EQ(error_of([&] { ProfileStore store(path("text.db")); }),
            path("text.db") + ": not a tessel database (not an SQLite file); refusing to touch it");
  EXPECT_EQ(read_file(path("text.db")), text_before);

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path("foreign.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE invoices(id INTEGER); INSERT INTO invoices VALUES (7);", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const std::string foreign_before = read_file(path("foreign.db"));
  EXPECT_EQ(error_of([&] { ProfileStore store(path("foreign.db")); }),
            path("foreign.db") + ": not a tessel database (another application's SQLite file); refusing to touch it");
  EXPECT_EQ(read_file(path("foreign.db")), foreign_before);
  EXPECT_FALSE(fs::exists(path("foreign.db") + "-wal"));

  {
    ProfileStore store(path("good.db"));
    store.put_profile(shipped_profile("local-cpu"));
  }
  std::string bytes = read_file(path("good.db"));
  for (std::size_t i = 100; i < bytes.size(); ++i) bytes[i] = char(0x5a);  // keep the header, wreck the rest
  {
    std::ofstream out(path("good.db"), std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  fs::remove(path("good.db") + "-wal");
  fs::remove(path("good.db") + "-shm");
  const std::string message = error_of([&] { ProfileStore store(path("good.db")); });
  EXPECT_EQ(message.rfind(path("good.db") + ": ", 0), 0u) << message;
  EXPECT_EQ(read_file(path("good.db")), bytes);
}

TEST_F(Store, TwoWritersAtOnceLoseNothing) {
  {
    ProfileStore store(path("shared.db"));
    store.put_profile(shipped_profile("local-cpu"));
  }
  constexpr int kBatches = 40, kPerBatch = 25;
  auto writer = [&](int id) {
    ProfileStore store(path("shared.db"));
    for (int batch = 0; batch < kBatches; ++batch) {
      std::vector<KernelSample> samples;
      for (int i = 0; i < kPerBatch; ++i) samples.push_back(gemm("local-cpu", 64 + id, 1e-3 + i * 1e-6));
      store.add_kernel_samples(samples);
    }
  };
  // Two processes, each with its own connection, as two profilers would be.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      writer(1);
      _exit(0);
    } catch (...) {
      _exit(1);
    }
  }
  writer(2);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ProfileStore store(path("shared.db"), ProfileStore::Access::read_only);
  const std::size_t shipped = shipped_profile("local-cpu").kernels.size();
  EXPECT_EQ(store.kernel_sample_count("local-cpu"), shipped + 2 * kBatches * kPerBatch);
}

TEST_F(Store, ResolveProfilePrefersTheDatabase) {
  const std::string db = path("resolve.db");
  EXPECT_NE(error_of([&] { resolve_profile("local-cpu", db); }).find("no such database"), std::string::npos);
  Profile measured = shipped_profile("local-cpu");
  measured.kernels = {gemm("local-cpu", 512, 4e-3)};
  measured.meta = {{"source", "measured"}};
  {
    ProfileStore store(db);
    store.put_profile(measured);
  }
  const Profile resolved = resolve_profile("local-cpu", db);
  ASSERT_EQ(resolved.kernels.size(), 1u);
  EXPECT_EQ(resolved.kernels[0].seconds, 4e-3);
  // A device the database does not hold falls back to the shipped profile.
  EXPECT_EQ(resolve_profile("H200", db).kernels.size(), shipped_profile("H200").kernels.size());
}
