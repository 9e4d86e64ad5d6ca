// The byte-level loader: data-parallel shards partition the global batch, a saved
// position replays the same batches, and bad input names the file.
#include <gtest/gtest.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/data_loader.hpp"
#include "tessel/executor/data_loader.hpp"

using namespace tessel;
using namespace tessel::executor;

TEST(DataLoader, ShardsPartitionTheGlobalBatch) {
  const std::string text = synthetic_corpus(10000, 3);
  DataLoader whole(text, 8, 16);
  DataLoader first(text, 8, 16, 0, 2), second(text, 8, 16, 1, 2);
  std::vector<std::int32_t> t, y, t0, y0, t1, y1;
  for (int step = 0; step < 3; ++step) {
    whole.next(t, y);
    first.next(t0, y0);
    second.next(t1, y1);
    t0.insert(t0.end(), t1.begin(), t1.end());
    y0.insert(y0.end(), y1.begin(), y1.end());
    EXPECT_EQ(t0, t);
    EXPECT_EQ(y0, y);
    for (std::size_t i = 0; i + 1 < 16; ++i) EXPECT_EQ(t[i + 1], y[i]);  // targets are the next bytes
  }
  EXPECT_EQ(whole.position(), 24u);
}

TEST(DataLoader, SavedPositionReplaysTheSameBatches) {
  const std::string text = synthetic_corpus(5000, 4);
  DataLoader a(text, 4, 32), b(text, 4, 32);
  std::vector<std::int32_t> t, y, t2, y2;
  a.next(t, y);
  a.next(t, y);
  const auto saved = a.position();
  a.next(t, y);
  b.seek(saved);
  b.next(t2, y2);
  EXPECT_EQ(t, t2);
  EXPECT_EQ(y, y2);
}

TEST(DataLoader, BadInputIsRefused) {
  EXPECT_THROW(DataLoader("short", 4, 32), Error);
  EXPECT_THROW(DataLoader(synthetic_corpus(1000, 1), 5, 8, 0, 2), Error);
  try {
    DataLoader::from_file("/nonexistent/corpus.txt", 4, 8);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "--data: /nonexistent/corpus.txt: cannot open file");
  }
}
