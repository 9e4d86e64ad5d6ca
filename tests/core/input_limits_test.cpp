// Outside input that used to give silent wrong answers or crashes: integers beyond
// their type (wrapped into small or negative ones), keys given twice, JSON nested
// without bound, files that are not files or never end, and programs too large for
// memory. Each is refused with one line naming the field and the bound.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>

#include "tessel/core/error.hpp"
#include "tessel/core/input_file.hpp"
#include "tessel/core/model_spec.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/core/program.hpp"
#include "support/error_of.hpp"
#include "support/scratch_folder.hpp"

using namespace tessel;
namespace fs = std::filesystem;

namespace {
using tessel::test::error_of;

Json small_model() {
  return Json{{"layers", 2}, {"hidden", 64}, {"heads", 4}, {"vocab", 256}, {"seq_len", 32}};
}

Json plan_json(const Json& model, const Json& train) {
  return Json{{"model", model}, {"cluster", "dgx-a100"}, {"train", train}, {"parallel", {{"dp", 8}}}};
}

class TempFolder : public tessel::test::ScratchFolderTest {};
}  // namespace

TEST(InputLimits, GlobalBatchBeyondItsBoundIsRefusedNotWrapped) {
  const Json json = plan_json("gpt2-124m", {{"global_batch", 1000000000000000LL}});
  EXPECT_EQ(error_of([&] { Plan::from_json(json, ""); }),
            "train.global_batch: must be a positive integer up to 16777216, got 1000000000000000");
}

TEST(InputLimits, ModelSizesBeyond32BitsAreRefusedNotTruncated) {
  Json model = small_model();
  model["seq_len"] = 4294967296LL;
  EXPECT_EQ(error_of([&] { ModelSpec::from_json(model); }),
            "model.seq_len: must be a positive integer up to 16777216, got 4294967296");
  model["seq_len"] = std::int64_t(1) << 40;
  EXPECT_NE(error_of([&] { ModelSpec::from_json(model); }).find("model.seq_len: must be a positive integer up to"),
            std::string::npos);
  model = small_model();
  model["layers"] = 4294967297LL;
  EXPECT_EQ(error_of([&] { ModelSpec::from_json(model); }),
            "model.layers: must be a positive integer up to 1000000, got 4294967297");
  model["layers"] = 18446744073709551615ULL;  // beyond int64: parsed unsigned
  EXPECT_EQ(error_of([&] { ModelSpec::from_json(model); }),
            "model.layers: must be a positive integer up to 1000000, got 18446744073709551615");
  Json train{{"global_batch", 8}, {"seq_len", 4294967296LL}};
  EXPECT_NE(error_of([&] { Plan::from_json(plan_json("gpt2-124m", train), ""); }).find("train.seq_len: must be"),
            std::string::npos);
}

TEST(InputLimits, HuggingFaceFieldsHaveTheSameBounds) {
  const Json config{{"model_type", "gpt2"}, {"n_layer", 4294967297LL}, {"n_embd", 64}, {"n_head", 4},
                    {"vocab_size", 256}, {"n_positions", 32}};
  EXPECT_EQ(error_of([&] { ModelSpec::from_hf_config(config, "hf", "model"); }),
            "model.n_layer: must be a positive integer up to 1000000, got 4294967297");
}

TEST(InputLimits, ModelsBeyondTheParameterBoundAreRefused) {
  const Json model{{"layers", 1000000}, {"hidden", 1 << 20}, {"heads", 16}, {"vocab", 256}, {"seq_len", 32}};
  const std::string message = error_of([&] { ModelSpec::from_json(model); });
  EXPECT_NE(message.find("parameters, more than the 1e+15 tessel models"), std::string::npos) << message;
}

TEST(InputLimits, WorldSizesBeyondTheGpuBoundAreRefused) {
  Json json = plan_json("gpt2-124m", {{"global_batch", 8}});
  json["parallel"] = {{"dp", 65536}, {"pp", 65536}};
  EXPECT_EQ(error_of([&] { Plan::from_json(json, ""); }),
            "parallel.dp: dp*pp*tp*sp = 4294967296 is more than the 16777216 GPUs tessel models");
  json = plan_json("gpt2-124m", {{"global_batch", 8}});
  json["nodes"] = 1000000000;
  EXPECT_EQ(error_of([&] { Plan::from_json(json, ""); }), "nodes: must be a positive integer up to 16777216, got 1000000000");
  json["nodes"] = 4000000;
  Plan plan = Plan::from_json(json, "");
  EXPECT_EQ(error_of([&] { plan.validate(); }),
            "nodes: 4000000 node(s) x 8 GPUs is more than the 16777216 GPUs tessel models");
}

TEST(InputLimits, DuplicateKeysAreRefused) {
  const std::string text = R"({"model": "gpt2-124m", "cluster": "dgx-a100", "model": "gpt3-175b"})";
  EXPECT_EQ(error_of([&] { parse_json_text(text, "plan.json"); }),
            "plan.json: key \"model\" appears twice in one object (each key may be given once)");
  // The same key in different objects is fine.
  EXPECT_NO_THROW(parse_json_text(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})", "ok.json"));
}

TEST(InputLimits, DeepNestingIsRefusedWithoutCrashing) {
  const std::string deep(100000, '[');
  EXPECT_EQ(error_of([&] { parse_json_text(deep, "deep.json"); }), "deep.json: JSON nested deeper than 64 levels");
  const std::string objects = [] {
    std::string text;
    for (int i = 0; i < 65; ++i) text += "{\"a\":";
    return text;
  }();
  EXPECT_EQ(error_of([&] { parse_json_text(objects, "deep.json"); }), "deep.json: JSON nested deeper than 64 levels");
  EXPECT_NO_THROW(parse_json_text(std::string(64, '[') + std::string(64, ']'), "ok.json"));
}

TEST_F(TempFolder, InputFilesThatAreNotFilesOrTooLargeAreRefused) {
  EXPECT_EQ(error_of([&] { read_input_file(dir_.string()); }), dir_.string() + ": is a directory, not a file");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of([&] { read_input_file("/dev/zero"); }),
            "/dev/zero: not a regular file (a device, pipe or socket); give a file");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  const std::string big = write("big.json", std::string(2000, ' ') + "{}");
  EXPECT_EQ(error_of([&] { read_input_file(big, 1000); }),
            big + ": 2002 bytes, more than the 1000 bytes tessel reads from an input file");
  EXPECT_EQ(read_input_file(big).size(), 2002u);
  EXPECT_EQ(error_of([&] { read_input_file((dir_ / "absent.json").string()); }),
            (dir_ / "absent.json").string() + ": cannot open file (no such file)");
  EXPECT_EQ(error_of([&] { Plan::load(dir_.string()); }), dir_.string() + ": is a directory, not a file");
  EXPECT_EQ(error_of([&] { resolve_model(dir_.string()); }), dir_.string() + ": is a directory, not a file");
}

TEST(InputLimits, ProgramsTooLargeForMemoryAreRefusedBeforeAnyOpIsMade) {
  Json model = small_model();
  model["layers"] = 1000000;
  Plan plan = Plan::from_json(plan_json(model, {{"global_batch", 1 << 20}}), "");
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { Program::lower(plan); });
  EXPECT_EQ(message.rfind("plan: its program needs about ", 0), 0u) << message;
  EXPECT_NE(message.find("GiB of memory"), std::string::npos) << message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}
