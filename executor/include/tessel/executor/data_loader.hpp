// Training data: the token ids of a TokenSource (text, any file, the synthetic corpus, or a
// pre-tokenised Megatron/nanoGPT/llm.c corpus; token_source.hpp). Step k's global batch is
// `global_batch` consecutive windows of seq + 1 tokens from the loader's position, each
// data-parallel rank reading its contiguous share. The position is one number, saved in
// checkpoints, so a resumed run reads exactly the batches an uninterrupted one would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/executor/token_source.hpp"

namespace tessel::executor {

class DataLoader {
 public:
  // Throws tessel::Error when the text is shorter than one window or the batch does not
  // split over the data-parallel ranks.
  DataLoader(std::string text, int global_batch, int seq, int dp_rank = 0, int dp_size = 1);
  // `vocab` > 0: next() refuses an id outside 0..vocab-1 it reads (the run's preflight
  // scanned the whole file already; this guards ranks started without it).
  DataLoader(TokenSource tokens, int global_batch, int seq, int dp_rank = 0, int dp_size = 1, std::int64_t vocab = 0);
  // Reads the whole file as byte-level text; the error names the file.
  static DataLoader from_file(const std::string& path, int global_batch, int seq, int dp_rank = 0, int dp_size = 1);

  int sequences_per_rank() const { return global_batch_ / dp_size_; }
  // This rank's share of the next global batch, row-major [sequences_per_rank x seq].
  void next(std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets);
  std::uint64_t position() const { return position_; }
  void seek(std::uint64_t position) { position_ = position; }

 private:
  std::int32_t token_at(std::uint64_t i) const;

  TokenSource tokens_;
  std::int64_t vocab_ = 0;
  int global_batch_, seq_, dp_rank_, dp_size_;
  std::uint64_t position_ = 0;
};

// Deterministic text for training without a data file: sentences from a small grammar.
std::string synthetic_corpus(std::size_t bytes, std::uint64_t seed);

}  // namespace tessel::executor
