// One prepared SQLite statement, its bindings checked, and a write transaction: what
// the profile and run stores share. Every failure is a tessel::Error naming the file.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::profiles {

class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql, const std::string& path) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK) fail("prepare");
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement& bind(int index, double value) { return check(sqlite3_bind_double(stmt_, index, value)); }
  Statement& bind(int index, std::int64_t value) { return check(sqlite3_bind_int64(stmt_, index, value)); }
  Statement& bind(int index, int value) { return check(sqlite3_bind_int(stmt_, index, value)); }
  Statement& bind(int index, std::string_view value) {
    return check(sqlite3_bind_text(stmt_, index, value.data(), int(value.size()), SQLITE_TRANSIENT));
  }
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail("step");
  }
  void run_and_reset() {
    step();
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  double real(int column) const { return sqlite3_column_double(stmt_, column); }
  std::int64_t integer(int column) const { return sqlite3_column_int64(stmt_, column); }
  std::string text(int column) const {
    const unsigned char* value = sqlite3_column_text(stmt_, column);
    return value ? reinterpret_cast<const char*>(value) : "";
  }

 private:
  Statement& check(int rc) {
    if (rc != SQLITE_OK) fail("bind");
    return *this;
  }
  [[noreturn]] void fail(const char* what) {
    throw Error(fmt::format("{}: database {} failed: {}", path_, what, sqlite3_errmsg(db_)));
  }
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string path_;
};

// Runs `body` inside BEGIN IMMEDIATE ... COMMIT, rolling back on any exception.
template <typename Body>
void in_transaction(sqlite3* db, const std::string& path, Body&& body) {
  auto exec = [&](const char* sql) {
    char* message = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
      std::string text = message ? message : "unknown error";
      sqlite3_free(message);
      throw Error(fmt::format("{}: {}", path, text));
    }
  };
  exec("BEGIN IMMEDIATE");
  try {
    body();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

}  // namespace tessel::profiles
