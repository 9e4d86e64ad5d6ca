// The read-only open builds a file: URI, so the path is percent-encoded where a URI
// would read it otherwise ('?', '#', '%'), and decides between mode=ro and immutable
// from what this process may write: immutable tells SQLite no one changes the file,
// which holds when it cannot be written here.
#include "database_open.hpp"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::profiles {

namespace {
std::string uri_path(const std::string& path) {
  std::string out;
  for (const char c : std::filesystem::absolute(path).string()) {
    if (c == '?' || c == '#' || c == '%') out += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else out += c;
  }
  return out;
}

bool nothing_here_can_write(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return false;
  const std::string folder = std::filesystem::absolute(path).parent_path().string();
  return (info.st_mode & 0222) == 0 || ::access(path.c_str(), W_OK) != 0 || ::access(folder.c_str(), W_OK) != 0;
}
}  // namespace

sqlite3* open_database_file(const std::string& path, bool read_only) {
  sqlite3* db = nullptr;
  int rc = SQLITE_OK;
  if (read_only) {
    const std::string uri = fmt::format("file:{}?{}", uri_path(path),
                                        nothing_here_can_write(path) ? "immutable=1" : "mode=ro");
    rc = sqlite3_open_v2(uri.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX, nullptr);
  } else {
    rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                         nullptr);
  }
  if (rc != SQLITE_OK) {
    const std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw Error(fmt::format("{}: cannot open database{}: {}", path, read_only ? " for reading" : "", message));
  }
  return db;
}

void check_database_integrity(sqlite3* db, const std::string& path) {
  sqlite3_stmt* statement = nullptr;
  std::string verdict;
  int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &statement, nullptr);
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(statement);
    const unsigned char* text = rc == SQLITE_ROW ? sqlite3_column_text(statement, 0) : nullptr;
    verdict = text != nullptr ? reinterpret_cast<const char*>(text) : sqlite3_errmsg(db);
  } else {
    verdict = sqlite3_errmsg(db);
  }
  sqlite3_finalize(statement);
  if (rc == SQLITE_ROW && verdict == "ok") return;
  for (char& c : verdict) c = c == '\n' ? ' ' : c;
  throw Error(fmt::format("{}: the database is damaged ({}); move it aside (tessel then starts a new one) or restore "
                          "a copy",
                          path, verdict));
}

}  // namespace tessel::profiles
