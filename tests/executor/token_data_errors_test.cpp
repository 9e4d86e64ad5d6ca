// The one-line refusals of the token readers: empty, truncated and mismatched files, bad
// headers, Megatron indexes that point outside their data, too few tokens for a global
// batch. Each message must name the file and the problem.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <limits>

#include "support/error_of.hpp"
#include "support/scratch_folder.hpp"
#include "tessel/core/error.hpp"
#include "tessel/executor/token_source.hpp"
#include "token_writers.hpp"

using namespace tessel;
using namespace tessel::executor;
using namespace tessel_token_test;
namespace fs = std::filesystem;

namespace {
class TokenErrors : public tessel::test::ScratchFolderTest {
 protected:
  // The error of opening `name`, or "" when it opened.
  std::string error_of(const std::string& name, TokenFormat format = TokenFormat::automatic,
                       TokenDType flat_dtype = TokenDType::u16) {
    const std::string text =
        tessel::test::error_of([&] { open_token_source(path(name), format, flat_dtype); }, "");
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
    return text;
  }
};

std::vector<std::int64_t> counting(std::size_t n) {
  std::vector<std::int64_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = std::int64_t(i % 1000);
  return ids;
}

// Writes the Megatron pair of `files` under `prefix`.
void write_pair(const std::string& prefix, const MegatronFiles& files) {
  write_bytes(prefix + ".bin", files.bin);
  write_bytes(prefix + ".idx", files.idx);
}
}  // namespace

TEST_F(TokenErrors, EmptyFilesAreRefused) {
  write_bytes(path("empty.bin"), "");
  EXPECT_EQ(error_of("empty.bin"), "--data: " + path("empty.bin") + ": empty file");
  EXPECT_EQ(error_of("empty.bin", TokenFormat::llmc), "--data: " + path("empty.bin") + ": empty file");
  write_megatron(path("nothing"), {});
  EXPECT_EQ(error_of("nothing", TokenFormat::megatron),
            "--data: " + path("nothing.idx") + ": the index lists no sequences (empty dataset)");
}

TEST_F(TokenErrors, TruncatedFlatFilesAreRefused) {
  std::string bytes = flat_ids(counting(100), 2);
  write_bytes(path("cut.bin"), bytes.substr(0, 199));
  EXPECT_EQ(error_of("cut.bin"),
            "--data: " + path("cut.bin") + ": 199 bytes, not a whole number of 2-byte uint16 tokens (truncated?)");
  write_bytes(path("cut32.bin"), flat_ids(counting(100), 4).substr(0, 398));
  EXPECT_EQ(error_of("cut32.bin", TokenFormat::nanogpt, TokenDType::u32),
            "--data: " + path("cut32.bin") + ": 398 bytes, not a whole number of 4-byte uint32 tokens (truncated?)");
}

TEST_F(TokenErrors, LlmcHeadersAreChecked) {
  const std::string shard = llmc_shard(counting(100));
  write_bytes(path("short.bin"), shard.substr(0, shard.size() - 2));
  EXPECT_EQ(error_of("short.bin"), "--data: " + path("short.bin") +
                                       ": llm.c header says 100 tokens, the file holds 198 bytes of uint16 tokens after "
                                       "it (truncated or mismatched)");
  write_bytes(path("header_only.bin"), shard.substr(0, 512));
  EXPECT_EQ(error_of("header_only.bin"),
            "--data: " + path("header_only.bin") + ": 512 bytes, shorter than llm.c's 1024-byte header");
  std::string bad_version = shard;
  bad_version[4] = 2;
  write_bytes(path("version.bin"), bad_version);
  EXPECT_EQ(error_of("version.bin"),
            "--data: " + path("version.bin") + ": llm.c version 2 with magic 20240520 (llm.c writes version 1 with it)");
  std::string bad_magic = shard;
  bad_magic[0] = 0;
  write_bytes(path("magic.bin"), bad_magic);
  EXPECT_NE(error_of("magic.bin", TokenFormat::llmc).find(path("magic.bin") + ": bad llm.c magic"), std::string::npos);
}

TEST_F(TokenErrors, MegatronHeadersAreChecked) {
  const MegatronFiles good = megatron_dataset(as_documents(counting(200)));
  // One header byte changed at a time: where, to what, and how the error ends.
  const struct {
    std::string name;
    std::size_t at;
    char value;
    std::string error;
  } headers[] = {{"magic", 0, 'X', ": bad magic, not a Megatron MMIDIDX index"},
                 {"version", 9, 2, ": index version 2, only version 1 is known"},
                 {"floats", 17, 7, ": dtype code 7 (float32) holds no token ids"},
                 {"unknown", 17, 9, ": unknown dtype code 9 (Megatron writes 1 to 8)"}};
  for (const auto& header : headers) {
    MegatronFiles changed = good;
    changed.idx[header.at] = header.value;
    write_pair(path(header.name), changed);
    EXPECT_EQ(error_of(header.name), "--data: " + path(header.name + ".idx") + header.error);
  }
  MegatronFiles cut = good;
  cut.idx.resize(cut.idx.size() - 8);
  write_pair(path("cut"), cut);
  EXPECT_NE(error_of("cut").find(path("cut.idx") + ": " + std::to_string(cut.idx.size()) + " bytes, but the header's"),
            std::string::npos)
      << error_of("cut");
  write_bytes(path("lonely.idx"), good.idx);
  EXPECT_EQ(error_of("lonely.idx"),
            "--data: " + path("lonely.idx") + ": a Megatron index needs its data file " + path("lonely") + ".bin next to it");
}

TEST_F(TokenErrors, MegatronIndexMustMatchItsData) {
  const auto ids = counting(200);
  const MegatronFiles good = megatron_dataset(as_documents(ids));
  MegatronFiles short_bin = good;
  short_bin.bin.resize(short_bin.bin.size() - 4);
  write_pair(path("short"), short_bin);
  EXPECT_NE(error_of("short").find(path("short.idx") + ": sequence 19 points to bytes"), std::string::npos)
      << error_of("short");
  EXPECT_NE(error_of("short").find("outside " + path("short.bin")), std::string::npos);
  MegatronFiles long_bin = good;
  long_bin.bin += std::string(6, '\0');
  write_pair(path("long"), long_bin);
  EXPECT_EQ(error_of("long"), "--data: " + path("long.idx") + ": the index covers 400 bytes, but " + path("long.bin") +
                                  " has 406 (mismatched pair?)");
  // Sequence 1's pointer moved by one id: sizes and pointers disagree.
  MegatronFiles moved = good;
  const std::size_t pointers_at = 34 + 4 * 20;  // 20 sequences of 1..19 ids and the rest
  moved.idx[pointers_at + 8] = char(moved.idx[pointers_at + 8] + 2);
  write_pair(path("moved"), moved);
  EXPECT_EQ(error_of("moved"), "--data: " + path("moved.idx") +
                                   ": sequence 1 starts at byte 4, but the sizes before it end at 2 (sizes and "
                                   "pointers disagree)");
}

TEST_F(TokenErrors, TooFewTokensForOneGlobalBatch) {
  write_nanogpt(path("few.bin"), counting(100));
  const TokenSource tokens = open_token_source(path("few.bin"), TokenFormat::automatic);
  EXPECT_EQ(tessel::test::error_of([&] { check_token_data(tokens, 1000, 8, 16); }),
            "--data: " + path("few.bin") +
                ": 100 tokens, fewer than one global batch of 8 windows of 16 (needs 129)");
  EXPECT_NO_THROW(check_token_data(tokens, 1000, 6, 16));
}

TEST_F(TokenErrors, ADtypeIsOnlyForHeaderlessFiles) {
  write_llmc(path("shard.bin"), counting(100));
  EXPECT_EQ(tessel::test::error_of([&] { open_token_source(path("shard.bin"), "auto", "uint32"); }),
            "--data-dtype: " + path("shard.bin") +
                " is read as llmc, which names its own dtype; --data-dtype is for headerless nanogpt files");
  EXPECT_THROW(open_token_source(path("shard.bin"), "auto", "int8"), Error);
  EXPECT_THROW(open_token_source(path("shard.bin"), "tokens", ""), Error);
}

// An llm.c shard whose magic is off by one was read as a headerless nanoGPT file, its
// header trained on as tokens: a file that almost matches llm.c's header is refused, and
// --data-format nanogpt still reads it when that is what it is.
TEST_F(TokenErrors, AFileThatAlmostMatchesLlmcsHeaderIsRefusedNotReadAsTokens) {
  std::string off_by_one = llmc_shard(counting(100));
  off_by_one[0] = char(off_by_one[0] + 1);  // magic 20240521
  write_bytes(path("near.bin"), off_by_one);
  const std::string message = error_of("near.bin");
  EXPECT_NE(message.find(path("near.bin") + ": almost an llm.c shard"), std::string::npos) << message;
  EXPECT_NE(message.find("magic 20240521"), std::string::npos) << message;
  EXPECT_NE(message.find("--data-format nanogpt"), std::string::npos) << message;
  std::string no_magic = llmc_shard(counting(100), true);
  for (int i = 0; i < 4; ++i) no_magic[std::size_t(i)] = 0;
  write_bytes(path("zero_magic.bin"), no_magic);
  EXPECT_NE(error_of("zero_magic.bin").find("almost an llm.c shard"), std::string::npos) << error_of("zero_magic.bin");
  // Asked for by name, the bytes are read as the flat tokens they then are.
  EXPECT_EQ(open_token_source(path("near.bin"), TokenFormat::nanogpt).count(), off_by_one.size() / 2);
  // An ordinary headerless file is still nanoGPT's.
  write_nanogpt(path("plain.bin"), counting(1000));
  EXPECT_EQ(open_token_source(path("plain.bin"), TokenFormat::automatic).format(), TokenFormat::nanogpt);
}

// A mapped token file cut short while it is read raised SIGBUS and killed the rank with
// no word: the process ends with one line naming the file and status 2.
TEST_F(TokenErrors, AFileTruncatedUnderTheReaderStopsWithOneLineNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  write_nanogpt(path("big.bin"), counting(std::size_t(1) << 20));
  const std::string file = path("big.bin");
  EXPECT_EXIT(
      {
        const TokenSource tokens = open_token_source(file, TokenFormat::nanogpt);
        fs::resize_file(file, 4096);
        std::int64_t sum = 0;
        for (std::uint64_t i = 0; i < tokens.count(); i += 1024) sum += tokens[i];
        std::exit(sum == -1 ? 3 : 4);  // reached only when no read faulted
      },
      ::testing::ExitedWithCode(2), "tessel: error: --data: .*big.bin: the file shrank while the run read it");
}

// Found by make fuzz: a sequence pointer near 2^63 overflowed int64 in the error line's
// end (undefined behaviour; a negative byte count in the message).
TEST_F(TokenErrors, APointerNearTheEndOfInt64IsNamedWithItsTrueEnd) {
  MegatronFiles far = megatron_dataset(as_documents(counting(200)));
  const std::size_t pointers_at = 34 + 4 * 20;  // 20 sequences
  const std::int64_t pointer = std::numeric_limits<std::int64_t>::max() - 29;
  std::memcpy(far.idx.data() + pointers_at, &pointer, sizeof pointer);
  std::int32_t size = 0;
  std::memcpy(&size, far.idx.data() + 34, sizeof size);
  write_pair(path("far"), far);
  const std::string end = std::to_string(std::uint64_t(pointer) + std::uint64_t(size) * 2);
  EXPECT_NE(error_of("far").find("sequence 0 points to bytes " + std::to_string(pointer) + ".." + end + ", outside"),
            std::string::npos)
      << error_of("far");
}
