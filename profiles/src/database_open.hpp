// Opens the SQLite file of the profile database for reading or for writing. Reading
// never writes: the file is opened read-only through a URI (mode=ro), and as immutable
// when nothing here could write it anyway (a read-only mount, a file without write
// permission, a folder we cannot write the WAL's side files into), because SQLite
// cannot otherwise read a WAL-mode file there. Writing creates the file when missing.
#pragma once

#include <string>

struct sqlite3;

namespace tessel::profiles {

// Returns the open handle; throws tessel::Error naming the file when it cannot be opened.
sqlite3* open_database_file(const std::string& path, bool read_only);

// SQLite's quick check of every page; throws tessel::Error naming the file and the first
// damage found (the header alone, read on open, can be intact in a damaged file).
void check_database_integrity(sqlite3* db, const std::string& path);

}  // namespace tessel::profiles
