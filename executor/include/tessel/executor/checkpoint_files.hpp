// The files of a checkpoint and the rules that make one trustworthy: DIR/step-NNNNNNNN/rank<r>.bin
// (header and floats) and DIR/checkpoint.json, the one pointer (step directory, loader position,
// plan, vocabulary multiple, each rank file's size and FNV-1a 64 checksum). A save fsyncs the
// new step directory before replacing the pointer atomically, so a crash leaves the previous
// checkpoint in force; resuming checks every field and file, one line per failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/core/json_fields.hpp"

namespace tessel::executor {

// FNV-1a 64-bit, continued from `hash` over `bytes` bytes.
constexpr std::uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ULL;
std::uint64_t fnv1a64(const void* bytes, std::size_t size, std::uint64_t hash = kFnvOffsetBasis);

// The fixed header at the start of each rank file.
struct RankFileHeader {
  std::uint64_t step = 0;
  std::uint64_t rank = 0;
  std::uint64_t elements = 0;  // floats after the header
};
constexpr std::size_t kRankFileHeaderBytes = 32;  // 8-byte magic + three 64-bit fields

struct RankFileDigest {
  std::uint64_t bytes = 0, checksum = 0;
};

// What checkpoint.json says.
struct CheckpointMeta {
  std::string directory;  // the step directory, relative to DIR
  int step = 0;
  std::uint64_t loader_position = 0;
  int ranks = 0;
  Json plan;
  // The multiple each vocabulary block was padded to (the writer's backend; rank files
  // hold no padding, but which rows a rank holds follows from it). 1 when absent.
  int vocab_multiple = 1;
  std::vector<RankFileDigest> files;  // one per rank, in rank order
};

std::string step_directory_name(int step);
std::string rank_file_name(int rank);

// Writes `header` and `floats` to `path` through path.tmp, fsyncs, renames; returns the
// file's size and checksum. Throws tessel::Error naming the file on any failure.
RankFileDigest write_rank_file(const std::string& path, const RankFileHeader& header,
                               const std::vector<std::vector<float>>& floats);
// Reads a rank file whole, checks size and checksum against `want` and the header against
// `header` (step, rank, elements); returns the floats after the header.
std::vector<float> read_rank_file(const std::string& path, const RankFileDigest& want, const RankFileHeader& header);

// Makes DIR's checkpoint.json point at `meta` (atomic replace, fsynced), then removes step
// directories other than meta's and `keep_previous`.
void publish_checkpoint(const std::string& dir, const CheckpointMeta& meta, const std::string& keep_previous);

// Reads and validates DIR/checkpoint.json: every field's type, step in [0, max_step],
// one rank file per rank. Throws tessel::Error ("--resume: FILE: ...") in one line.
CheckpointMeta read_checkpoint_meta(const std::string& dir, int max_step);

// Fsyncs a file or directory; throws tessel::Error naming it on failure.
void fsync_path(const std::string& path);

}  // namespace tessel::executor
