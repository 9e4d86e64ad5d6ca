// The profile database's schema as a list of migrations: index i brings a file from
// schema version i to i + 1 (PRAGMA user_version), so that every older file is migrated
// forward by the same statements a new one is created with. Its own file because the
// list only grows; profile_store.cpp runs it.
#pragma once

namespace tessel::profiles {

inline constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE devices(
  name TEXT PRIMARY KEY,
  kind TEXT NOT NULL CHECK(kind IN ('cpu', 'gpu')),
  peak_fp32_flops_per_s REAL NOT NULL, peak_tf32_flops_per_s REAL NOT NULL,
  peak_bf16_flops_per_s REAL NOT NULL, peak_fp16_flops_per_s REAL NOT NULL,
  memory_bytes REAL NOT NULL, memory_bandwidth_bytes_per_s REAL NOT NULL,
  memory_efficiency REAL NOT NULL, workspace_bytes REAL NOT NULL,
  sources TEXT NOT NULL, source TEXT NOT NULL);
CREATE TABLE kernel_samples(
  id INTEGER PRIMARY KEY,
  device TEXT NOT NULL REFERENCES devices(name),
  op TEXT NOT NULL CHECK(op IN ('gemm','attention','norm','elementwise','softmax','cross_entropy','optimizer','copy')),
  precision TEXT NOT NULL CHECK(precision IN ('fp32','tf32','bf16','fp16')),
  m INTEGER, n INTEGER, k INTEGER, elements INTEGER, b INTEGER, h INTEGER, s INTEGER, d INTEGER,
  seconds REAL NOT NULL CHECK(seconds > 0), spread REAL NOT NULL, flagged INTEGER NOT NULL,
  source TEXT NOT NULL CHECK(source IN ('measured','datasheet','calibrated')),
  host TEXT, date TEXT, tool_version TEXT);
CREATE INDEX kernel_samples_device ON kernel_samples(device, op, precision);
CREATE TABLE link_samples(
  id INTEGER PRIMARY KEY,
  fabric TEXT NOT NULL,
  collective TEXT NOT NULL CHECK(collective IN ('all_reduce','all_gather','reduce_scatter','broadcast','reduce','send_recv','all_to_all')),
  algorithm TEXT NOT NULL CHECK(algorithm IN ('ring','tree')),
  ranks INTEGER NOT NULL CHECK(ranks > 0), bytes REAL NOT NULL CHECK(bytes > 0), seconds REAL NOT NULL CHECK(seconds > 0),
  spread REAL NOT NULL, flagged INTEGER NOT NULL,
  source TEXT NOT NULL CHECK(source IN ('measured','datasheet','calibrated')),
  host TEXT, date TEXT, tool_version TEXT);
CREATE INDEX link_samples_fabric ON link_samples(fabric, collective);
CREATE TABLE profile_meta(device TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY(device, key));
)sql",
    // Version 2: training runs, next to the profiles they are compared with.
    R"sql(
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  created TEXT NOT NULL, host TEXT NOT NULL, tool_version TEXT NOT NULL,
  plan TEXT NOT NULL, backend TEXT NOT NULL, steps INTEGER NOT NULL,
  status TEXT NOT NULL CHECK(status IN ('running', 'finished', 'failed')), message TEXT NOT NULL);
CREATE TABLE run_steps(
  run INTEGER NOT NULL REFERENCES runs(id), step INTEGER NOT NULL,
  loss REAL NOT NULL, seconds REAL NOT NULL, tokens_per_s REAL NOT NULL, PRIMARY KEY(run, step));
CREATE TABLE run_events(
  run INTEGER NOT NULL REFERENCES runs(id), step INTEGER NOT NULL, rank INTEGER NOT NULL,
  stream TEXT NOT NULL, op TEXT NOT NULL, start_s REAL NOT NULL, end_s REAL NOT NULL);
CREATE INDEX run_events_op ON run_events(run, op);
CREATE TABLE run_memory(
  run INTEGER NOT NULL REFERENCES runs(id), rank INTEGER NOT NULL, peak_bytes REAL NOT NULL, PRIMARY KEY(run, rank));
)sql",
    // Version 3: a run stopped by a signal is 'interrupted' (SQLite cannot widen a CHECK:
    // the table is rebuilt, with foreign keys off around the migration).
    R"sql(
CREATE TABLE runs_v3(
  id INTEGER PRIMARY KEY,
  created TEXT NOT NULL, host TEXT NOT NULL, tool_version TEXT NOT NULL,
  plan TEXT NOT NULL, backend TEXT NOT NULL, steps INTEGER NOT NULL,
  status TEXT NOT NULL CHECK(status IN ('running', 'finished', 'failed', 'interrupted')), message TEXT NOT NULL);
INSERT INTO runs_v3 SELECT * FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v3 RENAME TO runs;
)sql",
    // Version 4: fp8 training. A device's fp8 peak (0: no fp8 tensor cores), and fp8 GEMM
    // samples, which the GPU profiler measures (the CHECK is widened by a rebuild).
    R"sql(
ALTER TABLE devices ADD COLUMN peak_fp8_flops_per_s REAL NOT NULL DEFAULT 0;
CREATE TABLE kernel_samples_v4(
  id INTEGER PRIMARY KEY,
  device TEXT NOT NULL REFERENCES devices(name),
  op TEXT NOT NULL CHECK(op IN ('gemm','attention','norm','elementwise','softmax','cross_entropy','optimizer','copy')),
  precision TEXT NOT NULL CHECK(precision IN ('fp32','tf32','bf16','fp16','fp8')),
  m INTEGER, n INTEGER, k INTEGER, elements INTEGER, b INTEGER, h INTEGER, s INTEGER, d INTEGER,
  seconds REAL NOT NULL CHECK(seconds > 0), spread REAL NOT NULL, flagged INTEGER NOT NULL,
  source TEXT NOT NULL CHECK(source IN ('measured','datasheet','calibrated')),
  host TEXT, date TEXT, tool_version TEXT);
INSERT INTO kernel_samples_v4 SELECT * FROM kernel_samples;
DROP TABLE kernel_samples;
ALTER TABLE kernel_samples_v4 RENAME TO kernel_samples;
CREATE INDEX kernel_samples_device ON kernel_samples(device, op, precision);
)sql",
    // Version 5: each rank's memory by category (the executor's ledger), the peak of the
    // total with the mix at that moment, and a GPU's device peak. run_memory keeps the
    // process peak; runs recorded before have no rows here and stay readable.
    R"sql(
CREATE TABLE run_memory_parts(
  run INTEGER NOT NULL REFERENCES runs(id), rank INTEGER NOT NULL,
  category TEXT NOT NULL CHECK(category IN ('parameters','gradients','optimizer','activations','workspace','total','device')),
  peak_bytes REAL NOT NULL, at_total_peak_bytes REAL NOT NULL, PRIMARY KEY(run, rank, category));
)sql",
    // Version 6: offload's model states in host memory, a rank's 'host' row (the CHECK is
    // widened by a rebuild).
    R"sql(
CREATE TABLE run_memory_parts_v6(
  run INTEGER NOT NULL REFERENCES runs(id), rank INTEGER NOT NULL,
  category TEXT NOT NULL
    CHECK(category IN ('parameters','gradients','optimizer','activations','workspace','total','device','host')),
  peak_bytes REAL NOT NULL, at_total_peak_bytes REAL NOT NULL, PRIMARY KEY(run, rank, category));
INSERT INTO run_memory_parts_v6 SELECT * FROM run_memory_parts;
DROP TABLE run_memory_parts;
ALTER TABLE run_memory_parts_v6 RENAME TO run_memory_parts;
)sql",
};

}  // namespace tessel::profiles
