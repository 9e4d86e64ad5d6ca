// `tessel run --data` on pre-tokenised corpora: the same ids in every format (byte-level
// text, nanoGPT, llm.c, Megatron) train to the same losses, a resumed run on a token file
// trains on exactly as the uninterrupted one, and bad data is refused with one line before
// any rank starts, leaving nothing behind. Runs train a 2-layer model on 2 CPU ranks.
#include <string>
#include <vector>

#include "../executor/token_writers.hpp"
#include "cli_fixture.hpp"

using namespace tessel_cli_test;
using namespace tessel_token_test;

namespace {
// A text of 6000 bytes, some past 127, and its bytes as token ids.
std::string corpus_text() {
  std::string text;
  for (int i = 0; text.size() < 6000; ++i) text += "token " + std::to_string(i * 7919 % 1000) + char(0xC0 + i % 32) + ' ';
  text.resize(6000);
  return text;
}

std::vector<std::int64_t> ids_of(const std::string& text) {
  std::vector<std::int64_t> ids;
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}
}  // namespace

TEST_F(Cli, TheSameIdsInEveryFormatTrainToTheSameLosses) {
  const std::string plan = write("tiny.json", kTinyPlan).string(), db = (dir_ / "r.db").string();
  const std::string text = corpus_text();
  const auto ids = ids_of(text);
  write("corpus.txt", text);
  write_nanogpt((dir_ / "train.bin").string(), ids);
  write_nanogpt((dir_ / "train32.bin").string(), ids, 4);
  write_llmc((dir_ / "shard_000000.bin").string(), ids);
  write_megatron((dir_ / "corpus_text_document").string(), as_documents(ids));
  const Outcome as_text = run("run --plan " + plan + " --steps 2 --db " + db + " --data " + (dir_ / "corpus.txt").string());
  ASSERT_EQ(as_text.status, 0) << as_text.out << as_text.err;
  ASSERT_EQ(printed_losses(as_text.out).size(), 2u) << as_text.out;
  const std::vector<std::string> data_arguments = {
      (dir_ / "train.bin").string(),
      (dir_ / "train.bin").string() + " --data-format nanogpt --data-dtype uint16",
      (dir_ / "train32.bin").string() + " --data-dtype uint32",
      (dir_ / "shard_000000.bin").string(),
      (dir_ / "corpus_text_document").string(),
      (dir_ / "corpus_text_document.bin").string() + " --data-format megatron",
      (dir_ / "corpus.txt").string() + " --data-format text",
  };
  for (const std::string& data : data_arguments) {
    const Outcome o = run("run --plan " + plan + " --steps 2 --db " + db + " --data " + data);
    ASSERT_EQ(o.status, 0) << data << "\n" << o.out << o.err;
    EXPECT_EQ(printed_losses(o.out), printed_losses(as_text.out)) << data;
  }
}

TEST_F(Cli, AResumedRunOnATokenFileTrainsOnExactly) {
  const std::string plan = write("tiny.json", kTinyPlan).string(), db = (dir_ / "r.db").string();
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 5000; ++i) ids.push_back((i * 131 + i / 7) % 256);
  const std::string data = (dir_ / "train.bin").string(), checkpoint = (dir_ / "ck").string();
  write_nanogpt(data, ids);
  const Outcome whole = run("run --plan " + plan + " --steps 4 --db " + db + " --data " + data);
  ASSERT_EQ(whole.status, 0) << whole.out << whole.err;
  const Outcome first = run("run --plan " + plan + " --steps 2 --db " + db + " --data " + data + " --checkpoint " +
                            checkpoint);
  ASSERT_EQ(first.status, 0) << first.out << first.err;
  const Outcome rest = run("run --plan " + plan + " --steps 4 --db " + db + " --data " + data + " --resume " + checkpoint);
  ASSERT_EQ(rest.status, 0) << rest.out << rest.err;
  const auto all = printed_losses(whole.out), head = printed_losses(first.out), tail = printed_losses(rest.out);
  ASSERT_EQ(all.size(), 4u) << whole.out;
  ASSERT_EQ(head.size(), 2u) << first.out;
  ASSERT_EQ(tail.size(), 2u) << rest.out;
  EXPECT_EQ(head, std::vector<std::string>(all.begin(), all.begin() + 2));
  EXPECT_EQ(tail, std::vector<std::string>(all.begin() + 2, all.end()));
}

TEST_F(Cli, BadDataIsRefusedOnOneLineBeforeAnyRankStarts) {
  const std::string plan = write("tiny.json", kTinyPlan).string();
  std::vector<std::int64_t> ids(3000, 65);
  const std::string shard = llmc_shard(ids);
  write_bytes((dir_ / "cut.bin").string(), shard.substr(0, shard.size() - 100));
  ids[1234] = 300;  // past the plan's vocabulary of 256
  write_nanogpt((dir_ / "wide.bin").string(), ids);
  write_nanogpt((dir_ / "few.bin").string(), std::vector<std::int64_t>(500, 1));
  write_bytes((dir_ / "empty.bin").string(), "");
  struct Refusal {
    std::string data, message;
  };
  const std::string cut = (dir_ / "cut.bin").string(), wide = (dir_ / "wide.bin").string(),
                    few = (dir_ / "few.bin").string(), empty = (dir_ / "empty.bin").string();
  const std::vector<Refusal> refusals = {
      {cut, "--data: " + cut + ": llm.c header says 3000 tokens, the file holds 5900 bytes of uint16 tokens after it "
                               "(truncated or mismatched)"},
      {wide, "--data: " + wide + ": token id 300 at position 1234 is outside the model's vocabulary of 256"},
      {few, "--data: " + few + ": 500 tokens, fewer than one global batch of 8 windows of 64 (needs 513)"},
      {empty, "--data: " + empty + ": empty file"},
      {wide + " --data-format llmc", "--data: " + wide + ": bad llm.c magic 4259905 (llm.c writes 20240520 or 20240801)"},
      {cut + " --data-dtype uint32",
       "--data-dtype: " + cut + " is read as llmc, which names its own dtype; --data-dtype is for headerless nanogpt "
                                "files"},
      {wide + " --data-format csv", "--data-format: must be text, megatron, nanogpt, llmc or auto, got csv"},
  };
  for (const Refusal& r : refusals) {
    const std::string checkpoint = (dir_ / "ck").string(), db = (dir_ / "r.db").string();
    const Outcome o = run("run --plan " + plan + " --steps 2 --db " + db + " --checkpoint " + checkpoint + " --data " +
                          r.data);
    EXPECT_EQ(o.status, 2) << r.data;
    EXPECT_EQ(o.err, "tessel: error: " + r.message + "\n") << r.data;
    EXPECT_FALSE(fs::exists(checkpoint)) << r.data;
    EXPECT_FALSE(fs::exists(db)) << r.data;
  }
  const Outcome no_data = run("run --plan " + plan + " --steps 2 --data-dtype uint32");
  EXPECT_EQ(no_data.status, 2);
  EXPECT_EQ(no_data.err, "tessel: error: --data-format, --data-dtype: give --data FILE too (without it the run trains "
                         "on a synthetic text)\n");
}
