// Engine names and the detection of a config's engine from its file.
#include <gtest/gtest.h>

#include "tessel/core/error.hpp"
#include "tessel/interop/engine_config.hpp"

namespace tessel::interop {
namespace {

TEST(EngineConfig, NamesRoundTripAndUnknownNamesAreRefusedByField) {
  for (Engine engine : {Engine::megatron, Engine::nemo, Engine::deepspeed, Engine::torchtitan})
    EXPECT_EQ(engine_from_name(engine_name(engine)), engine);
  try {
    engine_from_name("colossal", "--to");
    FAIL() << "an unknown engine was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("--to: unknown engine 'colossal'"), std::string::npos) << error.what();
  }
}

TEST(EngineConfig, DetectsTheEngineFromTheFile) {
  EXPECT_EQ(detect_engine("gpt.yaml", ""), Engine::nemo);
  EXPECT_EQ(detect_engine("gpt.YML", ""), Engine::nemo);
  EXPECT_EQ(detect_engine("llama3_8b.toml", ""), Engine::torchtitan);
  EXPECT_EQ(detect_engine("ds_config.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": 2}})"),
            Engine::deepspeed);
  EXPECT_EQ(detect_engine("train_gpt3_175b.sh", "torchrun pretrain_gpt.py --num-layers 96"), Engine::megatron);
  EXPECT_THROW(detect_engine("plan.json", R"({"model": "gpt2-124m"})"), Error);
}

}  // namespace
}  // namespace tessel::interop
