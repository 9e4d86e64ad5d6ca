#include "tessel/executor/data_loader.hpp"

#include <random>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

DataLoader::DataLoader(std::string text, int global_batch, int seq, int dp_rank, int dp_size)
    : DataLoader(TokenSource::from_text(std::move(text)), global_batch, seq, dp_rank, dp_size) {}

DataLoader::DataLoader(TokenSource tokens, int global_batch, int seq, int dp_rank, int dp_size, std::int64_t vocab)
    : tokens_(std::move(tokens)), vocab_(vocab), global_batch_(global_batch), seq_(seq), dp_rank_(dp_rank),
      dp_size_(dp_size) {
  if (seq <= 0 || global_batch <= 0) throw Error(fmt::format("data: batch {} and sequence {} must be positive", global_batch, seq));
  if (tokens_.count() < std::uint64_t(seq) + 1) {
    if (tokens_.format() == TokenFormat::text) {
      const std::string named = tokens_.origin() == "text" ? "" : fmt::format(" ({})", tokens_.origin());
      throw Error(fmt::format("--data: the text has {} bytes, fewer than one window of sequence {} + 1{}",
                              tokens_.count(), seq, named));
    }
    throw Error(fmt::format("--data: {}: {} tokens, fewer than one window of sequence {} + 1", tokens_.origin(),
                            tokens_.count(), seq));
  }
  if (dp_size <= 0 || dp_rank < 0 || dp_rank >= dp_size || global_batch % dp_size != 0) {
    throw Error(fmt::format("data: global batch {} does not split over {} data-parallel ranks", global_batch, dp_size));
  }
}

DataLoader DataLoader::from_file(const std::string& path, int global_batch, int seq, int dp_rank, int dp_size) {
  return DataLoader(open_token_source(path, TokenFormat::text), global_batch, seq, dp_rank, dp_size);
}

void DataLoader::next(std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets) {
  const int mine = sequences_per_rank();
  tokens.resize(std::size_t(mine) * seq_);
  targets.resize(tokens.size());
  const std::uint64_t windows = tokens_.count() - std::uint64_t(seq_);  // valid window starts
  for (int i = 0; i < mine; ++i) {
    const std::uint64_t window = position_ + std::uint64_t(dp_rank_ * mine + i);
    const std::uint64_t start = (window * std::uint64_t(seq_)) % windows;
    for (int s = 0; s < seq_; ++s) {
      tokens[std::size_t(i) * seq_ + s] = token_at(start + s);
      targets[std::size_t(i) * seq_ + s] = token_at(start + s + 1);
    }
  }
  position_ += std::uint64_t(global_batch_);
}

std::int32_t DataLoader::token_at(std::uint64_t i) const {
  const std::int64_t id = tokens_[i];
  if (id < 0 || (vocab_ > 0 && id >= vocab_)) {
    throw Error(fmt::format("--data: {}: token id {} at position {} is outside the model's vocabulary of {}",
                            tokens_.origin(), id, i, vocab_));
  }
  return std::int32_t(id);
}

std::string synthetic_corpus(std::size_t bytes, std::uint64_t seed) {
  // A small grammar: subject verb object, with adjectives and connectives.
  static const char* kSubjects[] = {"the cat", "a dog", "the bird", "my friend", "the old man", "a child"};
  static const char* kVerbs[] = {"sees", "likes", "chases", "finds", "watches", "draws"};
  static const char* kAdjectives[] = {"red", "small", "quiet", "happy", "tall", "green"};
  static const char* kObjects[] = {"ball", "tree", "house", "river", "book", "garden"};
  static const char* kEnds[] = {". ", ", and then ", "! ", ". "};
  std::mt19937_64 rng(seed);
  auto pick = [&](const auto& list) { return list[rng() % (sizeof(list) / sizeof(list[0]))]; };
  std::string text;
  while (text.size() < bytes) {
    text += pick(kSubjects);
    text += ' ';
    text += pick(kVerbs);
    text += " the ";
    text += pick(kAdjectives);
    text += ' ';
    text += pick(kObjects);
    text += pick(kEnds);
  }
  text.resize(bytes);
  return text;
}

}  // namespace tessel::executor
