// The profile database: one SQLite file (WAL mode) of devices, kernel and link samples and
// profile metadata. The schema is versioned (PRAGMA user_version) and migrated on open; the file
// is marked as tessel's (PRAGMA application_id) so a foreign or corrupt file is refused and never
// written. Every write is one transaction (busy timeout, BEGIN IMMEDIATE), so concurrent
// profilers both succeed and lose nothing.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/profiles/profile.hpp"

struct sqlite3;

namespace tessel::profiles {

class ProfileStore {
 public:
  static constexpr int kSchemaVersion = 6;

  // read_write: opens, creating the file and its folder, and migrates. read_only: opens
  // an existing file without writing anything (a read-only file or mount works); its
  // schema must be current. Throws tessel::Error naming the file when it is missing
  // (read_only), a directory, foreign, corrupted, newer or (read_only) older.
  enum class Access { read_write, read_only };
  explicit ProfileStore(const std::string& path, Access access = Access::read_write);
  ~ProfileStore();
  ProfileStore(const ProfileStore&) = delete;
  ProfileStore& operator=(const ProfileStore&) = delete;

  const std::string& path() const { return path_; }
  int schema_version() const;
  // Reads every page (SQLite's quick check); throws tessel::Error naming the file when it
  // is damaged. Commands that measure for minutes before they write call it first.
  void check_integrity() const;

  // Inserts or replaces the device row and adds the samples and metadata, in one transaction.
  void put_profile(const Profile& profile);
  // Replaces every sample of `profile.device.name` (and its link samples' fabrics).
  void replace_profile(const Profile& profile);
  void add_kernel_samples(const std::vector<KernelSample>& samples);
  void add_link_samples(const std::vector<LinkSample>& samples);

  std::vector<std::string> devices() const;
  // The device, its kernel samples and every link sample; nullopt if the device is absent.
  std::optional<Profile> load(const std::string& device) const;
  std::size_t kernel_sample_count(const std::string& device) const;
  std::size_t link_sample_count() const;

  // $TESSEL_DB, else $XDG_DATA_HOME/tessel/tessel.db, else ~/.local/share/tessel/tessel.db.
  static std::string default_path();

 private:
  void migrate();
  void exec(const std::string& sql) const;
  void put_device(const DeviceSpec& device, const std::string& source);
  sqlite3* db_ = nullptr;
  std::string path_;
  friend class RunStore;
};

// The profile the planner should believe for `device`: the database's, when the
// database file exists and holds that device, else the shipped datasheet profile. The
// database is only read.
// `db_path` empty = ProfileStore::default_path().
Profile resolve_profile(const std::string& device, const std::string& db_path = "");

}  // namespace tessel::profiles
