// The token readers behind `tessel run --data`: a corpus written in each format (by
// token_writers.hpp, from the formats' definitions) reads back as the same ids, auto
// detection picks the format, the DataLoader's windows over a token file are the file's
// ids, and byte-level text gives exactly the tokens it always gave.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <random>

#include "support/error_of.hpp"
#include "support/scratch_folder.hpp"
#include "tessel/core/error.hpp"
#include "tessel/executor/data_loader.hpp"
#include "tessel/executor/token_source.hpp"
#include "token_writers.hpp"

using namespace tessel;
using namespace tessel::executor;
using namespace tessel_token_test;
namespace fs = std::filesystem;

namespace {
std::vector<std::int64_t> random_ids(std::size_t count, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> ids(count);
  for (auto& id : ids) id = std::int64_t(rng() % std::uint64_t(vocab));
  return ids;
}

std::vector<std::int64_t> all_ids(const TokenSource& tokens) {
  std::vector<std::int64_t> out(tokens.count());
  for (std::uint64_t i = 0; i < tokens.count(); ++i) out[i] = tokens[i];
  return out;
}

class TokenData : public tessel::test::ScratchFolderTest {};
}  // namespace

TEST_F(TokenData, EachFormatReadsBackTheSameIds) {
  const auto small = random_ids(5000, 50257, 1);    // GPT-2's vocabulary: uint16
  const auto large = random_ids(5000, 128256, 2);   // Llama 3's: needs 32 bits
  write_nanogpt(path("small16.bin"), small, 2);
  write_nanogpt(path("large32.bin"), large, 4);
  write_llmc(path("gpt2_shard.bin"), small, false);
  write_llmc(path("llama3_shard.bin"), large, true);
  write_megatron(path("small_text_document"), as_documents(small), 8);
  write_megatron(path("large_text_document"), as_documents(large), 4);

  struct Case {
    std::string file;
    TokenFormat format;
    TokenDType flat_dtype, dtype;
    const std::vector<std::int64_t>* ids;
  };
  const std::vector<Case> cases = {
      {"small16.bin", TokenFormat::nanogpt, TokenDType::u16, TokenDType::u16, &small},
      {"large32.bin", TokenFormat::nanogpt, TokenDType::u32, TokenDType::u32, &large},
      {"gpt2_shard.bin", TokenFormat::llmc, TokenDType::u16, TokenDType::u16, &small},
      {"llama3_shard.bin", TokenFormat::llmc, TokenDType::u16, TokenDType::u32, &large},
      {"small_text_document", TokenFormat::megatron, TokenDType::u16, TokenDType::u16, &small},
      {"large_text_document", TokenFormat::megatron, TokenDType::u16, TokenDType::i32, &large},
  };
  for (const Case& c : cases) {
    for (TokenFormat asked : {c.format, TokenFormat::automatic}) {
      const TokenSource tokens = open_token_source(path(c.file), asked, c.flat_dtype);
      EXPECT_EQ(tokens.format(), c.format) << c.file;
      EXPECT_EQ(tokens.dtype(), c.dtype) << c.file;
      EXPECT_EQ(all_ids(tokens), *c.ids) << c.file << " read as " << to_string(asked);
    }
  }
}

TEST_F(TokenData, AMegatronDatasetIsNamedByItsPrefixOrEitherFile) {
  const auto ids = random_ids(300, 1000, 3);
  write_megatron(path("corpus_text_document"), as_documents(ids));
  for (const std::string name : {"corpus_text_document", "corpus_text_document.bin", "corpus_text_document.idx"}) {
    const TokenSource tokens = open_token_source(path(name), TokenFormat::automatic);
    EXPECT_EQ(tokens.format(), TokenFormat::megatron) << name;
    EXPECT_EQ(all_ids(tokens), ids) << name;
    EXPECT_EQ(tokens.origin(), path("corpus_text_document.bin"));
  }
}

TEST_F(TokenData, AutoReadsOtherFilesAsText) {
  write_bytes(path("notes.txt"), "hello, tokens");
  const TokenSource tokens = open_token_source(path("notes.txt"), TokenFormat::automatic);
  EXPECT_EQ(tokens.format(), TokenFormat::text);
  ASSERT_EQ(tokens.count(), 13u);
  EXPECT_EQ(tokens[0], 'h');
  EXPECT_EQ(tokens[12], 's');
}

// The windows a loader hands out over a token file are the file's ids at the same
// offsets the byte loader always used: window w starts at (w * seq) mod (count - seq).
TEST_F(TokenData, LoaderWindowsAreTheFilesIds) {
  const auto ids = random_ids(4001, 50000, 4);
  write_nanogpt(path("train.bin"), ids);
  const int global_batch = 8, seq = 16;
  DataLoader first(open_token_source(path("train.bin"), TokenFormat::automatic), global_batch, seq, 0, 2, 50000);
  DataLoader second(open_token_source(path("train.bin"), TokenFormat::automatic), global_batch, seq, 1, 2, 50000);
  std::vector<std::int32_t> t0, y0, t1, y1;
  const std::uint64_t starts = ids.size() - seq;
  for (int step = 0; step < 40; ++step) {  // past the end: windows wrap around
    first.next(t0, y0);
    second.next(t1, y1);
    t0.insert(t0.end(), t1.begin(), t1.end());
    y0.insert(y0.end(), y1.begin(), y1.end());
    for (int row = 0; row < global_batch; ++row) {
      const std::uint64_t start = (std::uint64_t(step * global_batch + row) * seq) % starts;
      for (int s = 0; s < seq; ++s) {
        ASSERT_EQ(t0[std::size_t(row * seq + s)], ids[start + s]) << "step " << step << " row " << row;
        ASSERT_EQ(y0[std::size_t(row * seq + s)], ids[start + s + 1]) << "step " << step << " row " << row;
      }
    }
  }
}

// Text reads as it always did: the unsigned bytes, through either constructor or a file.
TEST_F(TokenData, TextGivesTheSameTokensAsBefore) {
  std::string text = synthetic_corpus(3000, 7);
  text[5] = char(0xE9);  // a byte past 127 stays 233, not negative
  write_bytes(path("corpus.txt"), text);
  DataLoader from_string(text, 4, 32), from_file = DataLoader::from_file(path("corpus.txt"), 4, 32);
  DataLoader from_source(open_token_source(path("corpus.txt"), "auto", ""), 4, 32, 0, 1, 256);
  std::vector<std::int32_t> a, ay, b, by, c, cy;
  const std::uint64_t starts = text.size() - 32;
  for (int step = 0; step < 30; ++step) {
    from_string.next(a, ay);
    from_file.next(b, by);
    from_source.next(c, cy);
    EXPECT_EQ(a, b);
    EXPECT_EQ(a, c);
    EXPECT_EQ(ay, cy);
    for (int row = 0; row < 4; ++row) {
      const std::uint64_t start = (std::uint64_t(step * 4 + row) * 32) % starts;
      EXPECT_EQ(a[std::size_t(row * 32)], static_cast<unsigned char>(text[start]));
    }
  }
}

TEST_F(TokenData, TheVocabularyScanNamesTheFirstBadIdAndItsPosition) {
  auto ids = random_ids(1000, 256, 5);
  ids[700] = 256;
  ids[900] = 4000;
  write_nanogpt(path("tokens.bin"), ids);
  const TokenSource tokens = open_token_source(path("tokens.bin"), TokenFormat::nanogpt);
  const auto bad = tokens.first_out_of_range(256);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->position, 700u);
  EXPECT_EQ(bad->id, 256);
  EXPECT_FALSE(tokens.first_out_of_range(4001).has_value());  // a uint16 file, a vocabulary past it: fine
  EXPECT_EQ(tessel::test::error_of([&] { check_token_data(tokens, 256, 4, 16); }),
            "--data: " + path("tokens.bin") +
                ": token id 256 at position 700 is outside the model's vocabulary of 256");
  // The loader refuses such an id too when it reads one (ranks started without the preflight).
  DataLoader loader(tokens, 1, 999, 0, 1, 256);
  std::vector<std::int32_t> t, y;
  EXPECT_THROW(loader.next(t, y), Error);
}
