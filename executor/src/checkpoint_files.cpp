// Checkpoint files (checkpoint_files.hpp). POSIX calls where durability matters: a rank
// file and the pointer are fsynced before the rename that publishes them, and their
// directory after, so that what checkpoint.json names is on disk before it names it.
#include "tessel/executor/checkpoint_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

namespace fs = std::filesystem;

namespace {
constexpr char kMagic[8] = {'T', 'S', 'L', 'C', 'K', 'P', 'T', '3'};
constexpr int kVersion = 3;

void put_u64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(char((value >> (8 * i)) & 0xff));
}
std::uint64_t get_u64(const std::string& in, std::size_t at) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | std::uint8_t(in[at + std::size_t(i)]);
  return value;
}

std::string hex(std::uint64_t value) { return fmt::format("{:016x}", value); }

void write_all(int fd, const char* data, std::size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written <= 0) {
      ::close(fd);
      throw Error(fmt::format("--checkpoint: {}: write failed ({})", path, std::strerror(errno)));
    }
    data += written;
    size -= std::size_t(written);
  }
}

// Writes `bytes` to path.tmp, fsyncs it, renames it to path and fsyncs the directory.
void write_durably(const std::string& path, const std::string& bytes) {
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("--checkpoint: {}: cannot write ({})", temporary, std::strerror(errno)));
  write_all(fd, bytes.data(), bytes.size(), temporary);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    throw Error(fmt::format("--checkpoint: {}: cannot flush to disk ({})", temporary, std::strerror(errno)));
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) throw Error(fmt::format("--checkpoint: {}: cannot rename into place ({})", path, error.message()));
  fsync_path(fs::path(path).parent_path().string());
}

[[noreturn]] void refuse(const std::string& file, const std::string& message) {
  throw Error(fmt::format("--resume: {}: {}", file, message));
}

std::uint64_t unsigned_field(const Json& object, const char* key, const std::string& file) {
  const auto found = object.find(key);
  if (found == object.end()) refuse(file, fmt::format("{}: missing", key));
  if (!found->is_number_unsigned() && !(found->is_number_integer() && found->get<std::int64_t>() >= 0)) {
    refuse(file, fmt::format("{}: must be a non-negative integer, got {}", key, found->dump()));
  }
  return found->get<std::uint64_t>();
}

std::vector<RankFileDigest> read_digests(const Json& meta, int ranks, const std::string& file) {
  const auto files = meta.find("files");
  if (files == meta.end() || !files->is_array() || files->size() != std::size_t(ranks)) {
    refuse(file, fmt::format("files: must list one rank file per rank ({})", ranks));
  }
  std::vector<RankFileDigest> out;
  for (std::size_t r = 0; r < files->size(); ++r) {
    const Json& entry = (*files)[r];
    const auto checksum = entry.is_object() ? entry.find("fnv1a64") : entry.end();
    if (!entry.is_object() || entry.value("name", Json()) != rank_file_name(int(r)) || checksum == entry.end() ||
        !checksum->is_string() || checksum->get<std::string>().size() != 16) {
      refuse(file, fmt::format("files[{}]: must be {{\"name\": \"{}\", \"bytes\": N, \"fnv1a64\": 16 hex digits}}", r,
                               rank_file_name(int(r))));
    }
    RankFileDigest digest;
    digest.bytes = unsigned_field(entry, "bytes", file);
    try {
      std::size_t used = 0;
      digest.checksum = std::stoull(checksum->get<std::string>(), &used, 16);
      if (used != 16) throw std::invalid_argument("hex");
    } catch (const std::exception&) {
      refuse(file, fmt::format("files[{}].fnv1a64: must be 16 hex digits", r));
    }
    out.push_back(digest);
  }
  return out;
}
}  // namespace

std::uint64_t fnv1a64(const void* bytes, std::size_t size, std::uint64_t hash) {
  const auto* p = static_cast<const std::uint8_t*>(bytes);
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string step_directory_name(int step) { return fmt::format("step-{:08d}", step); }
std::string rank_file_name(int rank) { return fmt::format("rank{}.bin", rank); }

void fsync_path(const std::string& path) {
  const int fd = ::open(path.empty() ? "." : path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("--checkpoint: {}: cannot open to flush ({})", path, std::strerror(errno)));
  const int status = ::fsync(fd);
  ::close(fd);
  if (status != 0) throw Error(fmt::format("--checkpoint: {}: cannot flush to disk ({})", path, std::strerror(errno)));
}

RankFileDigest write_rank_file(const std::string& path, const RankFileHeader& header,
                               const std::vector<std::vector<float>>& floats) {
  std::string bytes(kMagic, sizeof(kMagic));
  put_u64(bytes, header.step);
  put_u64(bytes, header.rank);
  put_u64(bytes, header.elements);
  for (const std::vector<float>& part : floats) {
    bytes.append(reinterpret_cast<const char*>(part.data()), part.size() * sizeof(float));
  }
  if (bytes.size() != kRankFileHeaderBytes + header.elements * sizeof(float)) {
    throw Error(fmt::format("internal: {}: {} floats announced, {} bytes written", path, header.elements, bytes.size()));
  }
  write_durably(path, bytes);
  return {bytes.size(), fnv1a64(bytes.data(), bytes.size())};
}

std::vector<float> read_rank_file(const std::string& path, const RankFileDigest& want, const RankFileHeader& header) {
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  if (error) refuse(path, "cannot open (the checkpoint is incomplete)");
  if (size != want.bytes) refuse(path, fmt::format("{} bytes, checkpoint.json says {}: torn or replaced", size, want.bytes));
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() != want.bytes) refuse(path, "cannot read it whole");
  const std::uint64_t checksum = fnv1a64(bytes.data(), bytes.size());
  if (checksum != want.checksum) {
    refuse(path, fmt::format("checksum {} differs from checkpoint.json's {}: the file is corrupt", hex(checksum),
                             hex(want.checksum)));
  }
  if (bytes.size() < kRankFileHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    refuse(path, "not a tessel rank file of this version");
  }
  const RankFileHeader got{get_u64(bytes, 8), get_u64(bytes, 16), get_u64(bytes, 24)};
  if (got.step != header.step) refuse(path, fmt::format("holds step {}, checkpoint.json says step {}", got.step, header.step));
  if (got.rank != header.rank) refuse(path, fmt::format("holds rank {}'s state, expected rank {}", got.rank, header.rank));
  if (got.elements != header.elements || bytes.size() != kRankFileHeaderBytes + got.elements * sizeof(float)) {
    refuse(path, fmt::format("holds {} values, this model and layout need {} on this rank", got.elements, header.elements));
  }
  std::vector<float> values(got.elements);
  std::memcpy(values.data(), bytes.data() + kRankFileHeaderBytes, values.size() * sizeof(float));
  return values;
}

void publish_checkpoint(const std::string& dir, const CheckpointMeta& meta, const std::string& keep_previous) {
  Json files = Json::array();
  for (std::size_t r = 0; r < meta.files.size(); ++r) {
    files.push_back({{"name", rank_file_name(int(r))}, {"bytes", meta.files[r].bytes}, {"fnv1a64", hex(meta.files[r].checksum)}});
  }
  const Json pointer{{"format", "tessel-checkpoint"}, {"version", kVersion},
                     {"directory", meta.directory},   {"step", meta.step},
                     {"loader_position", meta.loader_position}, {"ranks", meta.ranks},
                     {"plan", meta.plan},             {"vocab_multiple", meta.vocab_multiple},
                     {"files", files}};
  write_durably((fs::path(dir) / "checkpoint.json").string(), pointer.dump(1) + "\n");
  // Older step directories (and any a crashed save left) are no longer named by anything.
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name != meta.directory && name != keep_previous) fs::remove_all(entry.path(), error);
  }
}

CheckpointMeta read_checkpoint_meta(const std::string& dir, int max_step) {
  const std::string file = (fs::path(dir) / "checkpoint.json").string();
  if (fs::is_directory(file)) refuse(file, "is a directory");
  if (!fs::exists(file)) refuse(dir, "no complete checkpoint (checkpoint.json missing)");
  const Json meta = read_json_file(file);
  if (!meta.is_object() || meta.value("format", Json()) != "tessel-checkpoint" || meta.value("version", Json()) != kVersion) {
    refuse(file, fmt::format("not a tessel checkpoint of version {}", kVersion));
  }
  CheckpointMeta out;
  const auto step = meta.find("step");
  if (step == meta.end() || !step->is_number_integer()) {
    refuse(file, fmt::format("step: must be an integer, got {}", step == meta.end() ? "nothing" : step->dump()));
  }
  if (step->get<std::int64_t>() < 0) refuse(file, fmt::format("step: must be 0 or more, got {}", step->dump()));
  if (step->get<std::int64_t>() > max_step) {
    refuse(file, fmt::format("step {} is beyond --steps {}: nothing would train (--steps counts from step 0)",
                             step->dump(), max_step));
  }
  out.step = int(step->get<std::int64_t>());
  out.loader_position = unsigned_field(meta, "loader_position", file);
  const std::uint64_t ranks = unsigned_field(meta, "ranks", file);
  if (ranks < 1 || ranks > (1u << 24)) refuse(file, fmt::format("ranks: must be 1 or more, got {}", ranks));
  out.ranks = int(ranks);
  const auto directory = meta.find("directory");
  if (directory == meta.end() || !directory->is_string() || directory->get<std::string>() != step_directory_name(out.step)) {
    refuse(file, fmt::format("directory: must be \"{}\" for step {}", step_directory_name(out.step), out.step));
  }
  out.directory = directory->get<std::string>();
  const auto plan = meta.find("plan");
  if (plan == meta.end() || !plan->is_object()) refuse(file, "plan: must be the plan's JSON object");
  out.plan = *plan;
  // Written since the executor pads the vocabulary; a checkpoint without it had none.
  if (meta.contains("vocab_multiple")) {
    const std::uint64_t multiple = unsigned_field(meta, "vocab_multiple", file);
    if (multiple < 1 || multiple > (1u << 16)) {
      refuse(file, fmt::format("vocab_multiple: must be in [1, 65536], got {}", multiple));
    }
    out.vocab_multiple = int(multiple);
  }
  out.files = read_digests(meta, out.ranks, file);
  return out;
}

}  // namespace tessel::executor
