#include "tessel/profiles/profile_store.hpp"

#include <sqlite3.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <fmt/format.h>

#include "database_open.hpp"
#include "sqlite_statement.hpp"
#include "store_schema.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/input_file.hpp"

namespace tessel::profiles {

namespace {
namespace fs = std::filesystem;

// "tssl" in ASCII: marks the file as a tessel database.
constexpr int kApplicationId = 0x7473736c;

// A CPU device's core count (DeviceSpec::cores) rides in profile_meta: no new column.
constexpr const char* kDeviceCoresKey = "device.cores";
// So does a CPU device's cuda_libraries_bytes.
constexpr const char* kCudaLibrariesKey = "device.cuda_libraries_bytes";

constexpr int kMigrationCount = int(sizeof(kMigrations) / sizeof(kMigrations[0]));
static_assert(kMigrationCount == ProfileStore::kSchemaVersion);

// Both sample tables end with the same provenance columns in the same order
// (spread, flagged, source, host, date, tool_version); source goes through the JSON
// reader with the rest so that it is validated, the others are copied here.
template <typename Sample>
void read_provenance_columns(Statement& row, int spread_column, Sample& sample) {
  sample.spread = row.real(spread_column);
  sample.flagged = row.integer(spread_column + 1) != 0;
  sample.host = row.text(spread_column + 3);
  sample.date = row.text(spread_column + 4);
  sample.tool_version = row.text(spread_column + 5);
}

bool starts_with_sqlite_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char header[16] = {};
  in.read(header, sizeof(header));
  return in.gcount() == 16 && std::string(header, 15) == "SQLite format 3";
}
}  // namespace

std::string ProfileStore::default_path() {
  if (const char* env = std::getenv("TESSEL_DB"); env && *env) return env;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return std::string(xdg) + "/tessel/tessel.db";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/tessel/tessel.db";
}

ProfileStore::ProfileStore(const std::string& path, Access access) : path_(path) {
  const bool read_only = access == Access::read_only;
  refuse_non_regular_file(path);
  std::error_code error;
  const bool exists = fs::exists(path, error);
  if (!exists && read_only) throw Error(fmt::format("{}: no such database", path));
  const bool empty_file = exists && fs::is_regular_file(path, error) && fs::file_size(path, error) == 0;
  if (exists && !empty_file && !starts_with_sqlite_header(path)) {
    throw Error(fmt::format("{}: not a tessel database (not an SQLite file); refusing to touch it", path));
  }
  if (!exists) {
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent, error);
  }
  db_ = open_database_file(path, read_only);
  sqlite3_busy_timeout(db_, 30000);
  try {
    // Identify the file before changing anything in it (statements scoped so that no
    // read transaction stays open).
    int application_id = 0;
    bool has_tables = false;
    {
      Statement app(db_, "PRAGMA application_id", path_);
      app.step();
      application_id = int(app.integer(0));
      Statement tables(db_, "SELECT count(*) FROM sqlite_master", path_);
      tables.step();
      has_tables = tables.integer(0) > 0;
    }
    if (application_id != kApplicationId && (application_id != 0 || has_tables)) {
      throw Error(fmt::format("{}: not a tessel database (another application's SQLite file); refusing to touch it", path));
    }
    const int version = schema_version();
    if (version > kSchemaVersion) {
      throw Error(fmt::format("{}: schema version {} is newer than this tessel understands ({})", path, version,
                              kSchemaVersion));
    }
    if (read_only) {
      if (version < kSchemaVersion) {
        throw Error(fmt::format("{}: schema version {} is older than this tessel's ({}); a command that writes (tessel "
                                "profile import) migrates it", path, version, kSchemaVersion));
      }
      return;
    }
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA foreign_keys=ON");
    migrate();
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

ProfileStore::~ProfileStore() { sqlite3_close(db_); }

void ProfileStore::exec(const std::string& sql) const {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message ? message : sqlite3_errmsg(db_);
    sqlite3_free(message);
    throw Error(fmt::format("{}: {}", path_, text));
  }
}

void ProfileStore::check_integrity() const { check_database_integrity(db_, path_); }

int ProfileStore::schema_version() const {
  Statement version(db_, "PRAGMA user_version", path_);
  version.step();
  return int(version.integer(0));
}

void ProfileStore::migrate() {
  // Rebuilding a table others reference (version 3) needs foreign keys off; the pragma
  // has no effect inside a transaction, so it brackets it.
  exec("PRAGMA foreign_keys=OFF");
  in_transaction(db_, path_, [&] {
    // Re-read inside the write lock: another process may have migrated meanwhile.
    for (int version = schema_version(); version < kSchemaVersion; ++version) {
      exec(kMigrations[version]);
      exec(fmt::format("PRAGMA user_version={}", version + 1));
    }
    exec(fmt::format("PRAGMA application_id={}", kApplicationId));
  });
  exec("PRAGMA foreign_keys=ON");
}

void ProfileStore::put_device(const DeviceSpec& d, const std::string& source) {
  Statement insert(db_,
                   "INSERT OR REPLACE INTO devices VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                   path_);
  insert.bind(1, std::string_view(d.name)).bind(2, std::string_view(d.kind)).bind(3, d.peak_fp32_flops_per_s);
  insert.bind(4, d.peak_tf32_flops_per_s).bind(5, d.peak_bf16_flops_per_s).bind(6, d.peak_fp16_flops_per_s);
  insert.bind(7, d.memory_bytes).bind(8, d.memory_bandwidth_bytes_per_s).bind(9, d.memory_efficiency);
  insert.bind(10, d.workspace_bytes).bind(11, std::string_view(d.sources.is_null() ? "{}" : d.sources.dump()));
  insert.bind(12, std::string_view(source)).bind(13, d.peak_fp8_flops_per_s);
  insert.run_and_reset();
}

namespace {
void insert_kernels(sqlite3* db, const std::string& path, const std::vector<KernelSample>& samples) {
  Statement insert(db,
                   "INSERT INTO kernel_samples(device, op, precision, m, n, k, elements, b, h, s, d, seconds, spread, "
                   "flagged, source, host, date, tool_version) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
                   "?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                   path);
  for (const KernelSample& s : samples) {
    insert.bind(1, std::string_view(s.device)).bind(2, to_string(s.op)).bind(3, std::string_view(s.precision));
    insert.bind(4, s.m).bind(5, s.n).bind(6, s.k).bind(7, s.elements);
    insert.bind(8, s.b).bind(9, s.h).bind(10, s.s).bind(11, s.d);
    insert.bind(12, s.seconds).bind(13, s.spread).bind(14, int(s.flagged)).bind(15, to_string(s.source));
    insert.bind(16, std::string_view(s.host)).bind(17, std::string_view(s.date)).bind(18, std::string_view(s.tool_version));
    insert.run_and_reset();
  }
}

void insert_links(sqlite3* db, const std::string& path, const std::vector<LinkSample>& samples) {
  Statement insert(db,
                   "INSERT INTO link_samples(fabric, collective, algorithm, ranks, bytes, seconds, spread, flagged, "
                   "source, host, date, tool_version) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                   path);
  for (const LinkSample& s : samples) {
    insert.bind(1, std::string_view(s.fabric)).bind(2, to_string(s.collective)).bind(3, to_string(s.algorithm));
    insert.bind(4, s.ranks).bind(5, s.bytes).bind(6, s.seconds).bind(7, s.spread).bind(8, int(s.flagged));
    insert.bind(9, to_string(s.source)).bind(10, std::string_view(s.host)).bind(11, std::string_view(s.date));
    insert.bind(12, std::string_view(s.tool_version));
    insert.run_and_reset();
  }
}
}  // namespace

void ProfileStore::put_profile(const Profile& profile) {
  in_transaction(db_, path_, [&] {
    put_device(profile.device, profile.meta.value("source", std::string("measured")));
    std::vector<KernelSample> kernels = profile.kernels;
    for (auto& sample : kernels) sample.device = profile.device.name;
    insert_kernels(db_, path_, kernels);
    insert_links(db_, path_, profile.links);
    Statement meta(db_, "INSERT OR REPLACE INTO profile_meta VALUES (?1, ?2, ?3)", path_);
    for (auto it = profile.meta.begin(); it != profile.meta.end(); ++it) {
      meta.bind(1, std::string_view(profile.device.name)).bind(2, std::string_view(it.key()));
      meta.bind(3, std::string_view(it.value().dump()));
      meta.run_and_reset();
    }
    if (profile.device.cores > 0) {
      const std::string cores = std::to_string(profile.device.cores);
      meta.bind(1, std::string_view(profile.device.name)).bind(2, std::string_view(kDeviceCoresKey)).bind(3, cores);
      meta.run_and_reset();
    }
    if (profile.device.cuda_libraries_bytes > 0) {
      const std::string bytes = Json(profile.device.cuda_libraries_bytes).dump();
      meta.bind(1, std::string_view(profile.device.name)).bind(2, std::string_view(kCudaLibrariesKey)).bind(3, bytes);
      meta.run_and_reset();
    }
  });
}

void ProfileStore::replace_profile(const Profile& profile) {
  in_transaction(db_, path_, [&] {
    Statement drop_kernels(db_, "DELETE FROM kernel_samples WHERE device = ?1", path_);
    drop_kernels.bind(1, std::string_view(profile.device.name)).run_and_reset();
    Statement drop_links(db_, "DELETE FROM link_samples WHERE fabric = ?1", path_);
    for (const auto& link : profile.links) drop_links.bind(1, std::string_view(link.fabric)).run_and_reset();
  });
  put_profile(profile);
}

void ProfileStore::add_kernel_samples(const std::vector<KernelSample>& samples) {
  in_transaction(db_, path_, [&] { insert_kernels(db_, path_, samples); });
}

void ProfileStore::add_link_samples(const std::vector<LinkSample>& samples) {
  in_transaction(db_, path_, [&] { insert_links(db_, path_, samples); });
}

std::vector<std::string> ProfileStore::devices() const {
  std::vector<std::string> names;
  Statement query(db_, "SELECT name FROM devices ORDER BY name", path_);
  while (query.step()) names.push_back(query.text(0));
  return names;
}

std::size_t ProfileStore::kernel_sample_count(const std::string& device) const {
  Statement query(db_, "SELECT count(*) FROM kernel_samples WHERE device = ?1", path_);
  query.bind(1, std::string_view(device));
  query.step();
  return std::size_t(query.integer(0));
}

std::size_t ProfileStore::link_sample_count() const {
  Statement query(db_, "SELECT count(*) FROM link_samples", path_);
  query.step();
  return std::size_t(query.integer(0));
}

std::optional<Profile> ProfileStore::load(const std::string& device) const {
  Statement query(db_, "SELECT * FROM devices WHERE name = ?1", path_);
  query.bind(1, std::string_view(device));
  if (!query.step()) return std::nullopt;
  Profile p;
  DeviceSpec& d = p.device;
  d.name = query.text(0);
  d.kind = query.text(1);
  d.peak_fp32_flops_per_s = query.real(2);
  d.peak_tf32_flops_per_s = query.real(3);
  d.peak_bf16_flops_per_s = query.real(4);
  d.peak_fp16_flops_per_s = query.real(5);
  d.memory_bytes = query.real(6);
  d.memory_bandwidth_bytes_per_s = query.real(7);
  d.memory_efficiency = query.real(8);
  d.workspace_bytes = query.real(9);
  d.sources = parse_json_text(query.text(10), path_);
  d.peak_fp8_flops_per_s = query.real(12);  // column 11 is the profile's source
  if (d.sources.is_object() && d.sources.empty()) d.sources = Json();

  Statement kernels(db_,
                    "SELECT op, precision, m, n, k, elements, b, h, s, d, seconds, spread, flagged, source, host, date, "
                    "tool_version FROM kernel_samples WHERE device = ?1 ORDER BY id",
                    path_);
  kernels.bind(1, std::string_view(device));
  while (kernels.step()) {
    Json row{{"op", kernels.text(0)}, {"precision", kernels.text(1)}, {"seconds", kernels.real(10)},
             {"source", kernels.text(13)}};
    const char* keys[] = {"m", "n", "k", "elements", "b", "h", "s", "d"};
    for (int i = 0; i < 8; ++i) {
      if (kernels.integer(2 + i) != 0) row[keys[i]] = kernels.integer(2 + i);
    }
    KernelSample sample = kernel_sample_from_json(row, device, path_);
    read_provenance_columns(kernels, 11, sample);
    p.kernels.push_back(std::move(sample));
  }
  Statement links(db_,
                  "SELECT fabric, collective, algorithm, ranks, bytes, seconds, spread, flagged, source, host, date, "
                  "tool_version FROM link_samples ORDER BY id",
                  path_);
  while (links.step()) {
    Json row{{"fabric", links.text(0)}, {"collective", links.text(1)}, {"algorithm", links.text(2)},
             {"ranks", links.integer(3)}, {"bytes", links.real(4)}, {"seconds", links.real(5)},
             {"source", links.text(8)}};
    LinkSample sample = link_sample_from_json(row, path_);
    read_provenance_columns(links, 6, sample);
    p.links.push_back(std::move(sample));
  }
  Statement meta(db_, "SELECT key, value FROM profile_meta WHERE device = ?1 ORDER BY key", path_);
  meta.bind(1, std::string_view(device));
  while (meta.step()) {
    const Json value = parse_json_text(meta.text(1), path_);
    if (meta.text(0) == kDeviceCoresKey) {
      if (value.is_number_integer()) d.cores = int(std::clamp<std::int64_t>(value, 0, limits::kMaxGpus));
    } else if (meta.text(0) == kCudaLibrariesKey) {
      if (value.is_number()) d.cuda_libraries_bytes = std::clamp(value.get<double>(), 0.0, limits::kMaxDeviceBytes);
    } else {
      p.meta[meta.text(0)] = value;
    }
  }
  return p;
}

Profile resolve_profile(const std::string& device, const std::string& db_path) {
  const std::string path = db_path.empty() ? ProfileStore::default_path() : db_path;
  std::error_code error;
  if (fs::exists(path, error) && fs::is_regular_file(path, error) && fs::file_size(path, error) == 0) {
    return shipped_profile(device);  // an empty file holds no profiles yet
  }
  if (fs::exists(path, error)) {
    ProfileStore store(path, ProfileStore::Access::read_only);
    if (auto profile = store.load(device)) return *profile;
  } else if (!db_path.empty()) {
    throw Error(fmt::format("--db: {}: no such database (tessel profile creates one)", path));
  }
  return shipped_profile(device);
}

}  // namespace tessel::profiles
