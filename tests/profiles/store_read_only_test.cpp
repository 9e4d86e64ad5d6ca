// The profile database opened for reading: it works on a file nothing here may write
// (a read-only file in a read-only folder, as on a read-only mount), leaves the file
// and its folder exactly as they were, and refuses a missing file, a directory and an
// old schema it would have to migrate.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/error_of.hpp"
#include "support/scratch_folder.hpp"
#include "tessel/core/error.hpp"
#include "tessel/profiles/profile_store.hpp"
#include "tessel/profiles/run_store.hpp"

using namespace tessel;
using namespace tessel::profiles;
namespace fs = std::filesystem;

namespace {
using tessel::test::error_of;
using tessel::test::read_file;

// The store's file sits in a folder of its own, which a test may make read-only.
class ReadOnlyStore : public tessel::test::ScratchFolderTest {
 protected:
  void SetUp() override {
    ScratchFolderTest::SetUp();
    fs::create_directories(dir_ / "folder");
  }
  void TearDown() override {
    fs::permissions(dir_ / "folder", fs::perms::owner_all);
    ScratchFolderTest::TearDown();
  }
};
}  // namespace

TEST_F(ReadOnlyStore, ReadsAFileNothingMayWriteAndLeavesItAlone) {
  const fs::path db = dir_ / "folder" / "p.db";
  {
    ProfileStore store(db.string());
    store.put_profile(shipped_profile("local-cpu"));
    RunStore(store).begin_run(Json{{"model", "gpt2-124m"}}, "cpu", 3);
  }
  const std::string before = read_file(db);
  fs::permissions(db, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(dir_ / "folder", fs::perms::owner_read | fs::perms::owner_exec);
  {
    ProfileStore store(db.string(), ProfileStore::Access::read_only);
    EXPECT_EQ(store.devices(), std::vector<std::string>{"local-cpu"});
    EXPECT_EQ(store.load("local-cpu")->kernels.size(), shipped_profile("local-cpu").kernels.size());
    EXPECT_EQ(RunStore(store).runs().size(), 1u);
    EXPECT_EQ(resolve_profile("local-cpu", db.string()).device.name, "local-cpu");
  }
  EXPECT_EQ(read_file(db), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "folder"), fs::directory_iterator()), 1);
}

TEST_F(ReadOnlyStore, ReadingNeverCreatesOrMigrates) {
  const fs::path missing = dir_ / "missing.db";
  EXPECT_EQ(error_of([&] { ProfileStore store(missing.string(), ProfileStore::Access::read_only); }),
            missing.string() + ": no such database");
  EXPECT_FALSE(fs::exists(missing));
  EXPECT_EQ(error_of([&] { ProfileStore store(dir_.string(), ProfileStore::Access::read_only); }),
            dir_.string() + ": is a directory, not a file");
  EXPECT_EQ(error_of([&] { ProfileStore store(dir_.string()); }), dir_.string() + ": is a directory, not a file");
  // A file of schema version 1 is migrated by writers only.
  const fs::path old = dir_ / "old.db";
  {
    ProfileStore store(old.string());
  }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(old.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "PRAGMA user_version=1", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  const std::string before = read_file(old);
  EXPECT_NE(error_of([&] { ProfileStore store(old.string(), ProfileStore::Access::read_only); })
                .find("schema version 1 is older than this tessel's"),
            std::string::npos);
  EXPECT_EQ(read_file(old), before);
}
