// Other engines' files written to break the readers (issue 38's audit): arithmetic that
// traps, nesting that would overflow the stack, aliases that expand without end or point
// at themselves, variables that double until memory runs out. Each is refused in one
// line, in bounded time, by a tessel::Error; none crashes or hangs the reader.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tessel/core/error.hpp"
#include "tessel/interop/engine_config.hpp"
#include "import_fixtures.hpp"

namespace tessel::interop {
namespace {

struct Refusal {
  std::string message;
  double seconds = 0;
};

Refusal refusal_of(Engine engine, const std::string& text, const std::string& source = "hostile") {
  const auto start = std::chrono::steady_clock::now();
  Refusal out;
  out.message = test::error_of([&] { import_run(engine, text, test::context_on("dgx-a100", 1, source)); }, "(accepted)");
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

// One line naming `expected`, short, and refused in bounded time.
::testing::AssertionResult one_line_naming(const Refusal& refusal, const std::string& expected) {
  const std::string shown = refusal.message.substr(0, 300);
  if (refusal.message.find(expected) == std::string::npos)
    return ::testing::AssertionFailure() << "does not name '" << expected << "': " << shown;
  if (refusal.message.find('\n') != std::string::npos) return ::testing::AssertionFailure() << "several lines: " << shown;
  if (refusal.message.size() >= 400u) return ::testing::AssertionFailure() << "over 400 characters: " << shown;
  if (refusal.seconds >= 5.0) return ::testing::AssertionFailure() << "took " << refusal.seconds << " s: " << shown;
  return ::testing::AssertionSuccess();
}

std::string megatron_with(const std::string& assignments) {
  return assignments + "\npython pretrain_gpt.py --num-layers $X --hidden-size 256 --num-attention-heads 8 "
                       "--seq-length 512 --max-position-embeddings 512 --vocab-size 1024 --micro-batch-size 2 "
                       "--global-batch-size 64\n";
}

TEST(HostileInput, MegatronArithmeticThatTrapsOrOverflowsIsRefused) {
  for (const char* expression : {"(-9223372036854775807 - 1) / -1", "9223372036854775807 + 1", "-9223372036854775807 - 2", "4611686018427387904 * 2",
                                 "-(-9223372036854775807 - 1)"}) {
    SCOPED_TRACE(expression);
    EXPECT_TRUE(one_line_naming(refusal_of(Engine::megatron, megatron_with(std::string("X=$((") + expression + "))")),
                           "hostile: line 1: $(("));
    EXPECT_NE(refusal_of(Engine::megatron, megatron_with(std::string("X=$((") + expression + "))")).message.find("64-bit"),
              std::string::npos);
  }
  // Ordinary arithmetic still reads, nested parentheses included; the remainder by -1
  // of the smallest integer is 0, as in bash, not a trap.
  for (const char* expression : {"(2*(1+2)) - 2", "((-9223372036854775807 - 1) % -1) + 4", "-(-4)"}) {
    SCOPED_TRACE(expression);
    const ImportedRun run = import_run(Engine::megatron, megatron_with(std::string("X=$((") + expression + "))"),
                                       test::context_on("dgx-a100", 1, "ok.sh"));
    EXPECT_EQ(run.plan.model.layers, 4);
  }
}

TEST(HostileInput, MegatronNestingIsBoundedNotRecursedWithoutLimit) {
  const int deep = 200000;
  EXPECT_TRUE(one_line_naming(
      refusal_of(Engine::megatron,
                 megatron_with("X=$(( " + std::string(deep, '(') + "1" + std::string(deep, ')') + " ))")),
      "nest"));
  EXPECT_TRUE(one_line_naming(refusal_of(Engine::megatron, megatron_with("X=$(( " + std::string(deep, '-') + "1 ))")),
                         "nest"));
  std::string braces = "X=";
  for (int i = 0; i < 20000; ++i) braces += "${A:-";
  braces += "1" + std::string(20000, '}');
  EXPECT_TRUE(one_line_naming(refusal_of(Engine::megatron, megatron_with(braces)), "nest"));
}

TEST(HostileInput, MegatronVariablesThatDoubleAreBoundedInSize) {
  std::string script = "X=ab\n";
  for (int i = 0; i < 40; ++i) script += "X=\"$X$X\"\n";
  EXPECT_TRUE(one_line_naming(refusal_of(Engine::megatron, megatron_with(script)), "MiB"));
  std::string arrays = "A=(a b)\n";
  for (int i = 0; i < 40; ++i) arrays += "A+=(${A[@]} ${A[@]})\n";
  EXPECT_TRUE(one_line_naming(refusal_of(Engine::megatron, megatron_with(arrays)), "MiB"));
  // One quoted word repeating a large variable many times (10 GB if expanded whole).
  std::string repeated = "Y=" + std::string(1000000, 'y') + "\nX=\"";
  for (int i = 0; i < 10000; ++i) repeated += "$Y";
  repeated += "\"\n";
  EXPECT_TRUE(one_line_naming(refusal_of(Engine::megatron, megatron_with(repeated)), "MiB"));
}

const char* kNemoHead = test::kSmallNemoRecipe;

TEST(HostileInput, NemoAnchorThatContainsItselfIsRefused) {
  EXPECT_TRUE(one_line_naming(refusal_of(Engine::nemo, std::string(kNemoHead) + "x: &me [1, *me]\n", "gpt.yaml"),
                         "gpt.yaml"));
  EXPECT_TRUE(one_line_naming(refusal_of(Engine::nemo, std::string(kNemoHead) + "  x: &me {a: 1, b: *me}\n", "gpt.yaml"),
                         "gpt.yaml"));
}

TEST(HostileInput, NemoAliasBombIsRefusedInBoundedTime) {
  // Eight lines of anchors, each ten of the one before: 10^8 leaves if walked.
  std::string sequences = "bomb:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  std::string maps = "  bomb:\n    a: &a {k0: x, k1: x, k2: x, k3: x, k4: x, k5: x, k6: x, k7: x, k8: x, k9: x}\n";
  const std::string names = "abcdefgh";
  for (std::size_t i = 1; i < names.size(); ++i) {
    const char name = names[i], previous = names[i - 1];
    sequences += std::string("  ") + name + ": &" + name + " [";
    maps += std::string("    ") + name + ": &" + name + " {";
    for (int k = 0; k < 10; ++k) {
      sequences += std::string(k ? ", " : "") + "*" + previous;
      maps += std::string(k ? ", " : "") + "k" + std::to_string(k) + ": *" + previous;
    }
    sequences += "]\n";
    maps += "}\n";
  }
  EXPECT_TRUE(one_line_naming(refusal_of(Engine::nemo, std::string(kNemoHead) + sequences, "gpt.yaml"), "100000"));
  EXPECT_TRUE(one_line_naming(refusal_of(Engine::nemo, std::string(kNemoHead) + maps, "gpt.yaml"), "100000"));
}

TEST(HostileInput, NemoSecondDocumentIsRefusedNotIgnored) {
  EXPECT_TRUE(one_line_naming(refusal_of(Engine::nemo, std::string(kNemoHead) + "---\nmodel:\n  num_layers: 96\n", "gpt.yaml"),
                         "gpt.yaml: holds more than one YAML document (the parser finds a second at line 1"));
  // Found by make fuzz: on this file yaml-cpp's parser yields documents without end, which
  // reading every document (LoadAll) followed for ever.
  EXPECT_TRUE(one_line_naming(refusal_of(Engine::nemo, " , kv_channels: null\n", "gpt.yaml"),
                         "gpt.yaml: holds more than one YAML document"));
  // A single document with its optional markers reads.
  const ImportedRun run = import_run(Engine::nemo, std::string("---\n") + kNemoHead + "...\n",
                                     test::context_on("dgx-a100", 1, "gpt.yaml"));
  EXPECT_EQ(run.plan.model.layers, 4);
}

TEST(HostileInput, MalformedDeepSpeedJsonIsCalledMalformed) {
  const std::string message =
      test::error_of([] { detect_engine("ds_config.json", "{\"train_batch_size\": 64,, }"); }, "(accepted)");
  EXPECT_NE(message.find("ds_config.json: malformed JSON"), std::string::npos) << message;
  EXPECT_EQ(message.find("not a DeepSpeed config"), std::string::npos) << message;
  // Well-formed JSON of another kind is still named as not DeepSpeed's.
  EXPECT_NE(test::error_of([] { detect_engine("x.json", "{\"layers\": 2}"); }).find("not a DeepSpeed config"),
            std::string::npos);
}

TEST(HostileInput, EmptyTorchtitanTomlSaysItHoldsNoModel) {
  for (const char* text : {"", "# only a comment\n", "[job]\ndump_folder = \"out\"\n"}) {
    SCOPED_TRACE(text);
    const Refusal refusal = refusal_of(Engine::torchtitan, text, "train.toml");
    EXPECT_TRUE(one_line_naming(refusal, "train.toml: [model]"));
    EXPECT_EQ(refusal.message.find("default"), std::string::npos) << refusal.message;
  }
}

}  // namespace
}  // namespace tessel::interop
