// The safetensors export and --init import (safetensors.hpp, hf_gpt2.hpp) against a reader
// written here from the format's description alone, not from the code under test: Hugging
// Face GPT-2's names and shapes, ranges without gaps or overlaps; a model written and read
// back trains on bit for bit, padded or not; bad files give one line naming the tensor.
#include <gtest/gtest.h>


#include <cmath>
#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "tessel/executor/checkpoint_files.hpp"
#include "tessel/executor/checkpoint_weights.hpp"
#include "tessel/executor/hf_gpt2.hpp"
#include "tessel/executor/trainer.hpp"
#include "tessel/kernels/numeric.hpp"
#include "export_round_trip.hpp"
#include "fixtures.hpp"
#include "safetensors_reader.hpp"

using namespace tessel;
using namespace tessel::executor;
using namespace tessel_executor_test;
using namespace tessel_safetensors_test;
namespace fs = std::filesystem;

namespace {
Plan tiny_plan() {
  return Plan::from_json(Json::parse(R"({"model": {"name": "tiny", "layers": 2, "hidden": 16, "heads": 2,
      "vocab": 256, "seq_len": 8}, "cluster": "local-cpu", "train": {"global_batch": 4, "precision": "fp32"},
      "parallel": {"micro_batch": 2}})"),
                         "");
}

// Hugging Face GPT-2 (GPT2LMHeadModel.state_dict() without lm_head, tied): name -> shape.
std::map<std::string, std::vector<std::int64_t>> hf_gpt2_layout(int layers, int n_embd, int vocab, int positions) {
  const std::int64_t C = n_embd;
  std::map<std::string, std::vector<std::int64_t>> out{{"transformer.wte.weight", {vocab, C}},
                                                      {"transformer.wpe.weight", {positions, C}},
                                                      {"transformer.ln_f.weight", {C}},
                                                      {"transformer.ln_f.bias", {C}}};
  for (int i = 0; i < layers; ++i) {
    const std::string h = fmt::format("transformer.h.{}.", i);
    for (const char* norm : {"ln_1", "ln_2"}) out[h + norm + ".weight"] = out[h + norm + ".bias"] = {C};
    out[h + "attn.c_attn.weight"] = {C, 3 * C};  // Conv1D: [in, out]
    out[h + "attn.c_attn.bias"] = {3 * C};
    out[h + "attn.c_proj.weight"] = {C, C};
    out[h + "attn.c_proj.bias"] = {C};
    out[h + "mlp.c_fc.weight"] = {C, 4 * C};
    out[h + "mlp.c_fc.bias"] = {4 * C};
    out[h + "mlp.c_proj.weight"] = {4 * C, C};
    out[h + "mlp.c_proj.bias"] = {C};
  }
  return out;
}

class Safetensors : public ScratchFolderTest {
 protected:
  // The tiny plan's initial weights exported (GPT-2, f32) to `name` in the folder: its bytes.
  std::string exported_tiny(const std::string& name) {
    write_gpt2_export(path(name), tiny_plan().model, initial_weights(tiny_plan()), SafetensorsDType::f32, {});
    return slurp(path(name));
  }
};
}  // namespace

TEST_F(Safetensors, ExportHasGpt2NamesShapesAndTilesTheDataSection) {
  const Plan plan = tiny_plan();
  const std::vector<float> whole = initial_weights(plan);
  const fs::path file = dir_ / "model.safetensors";
  write_gpt2_export(file.string(), plan.model, whole, SafetensorsDType::f32, {{"tessel_step", "0"}});
  const std::string bytes = slurp(file);
  const Parsed p = parse(bytes);
  EXPECT_EQ((8 + p.header_bytes) % 8, 0u) << "the data starts 8-byte aligned";
  EXPECT_EQ(p.metadata.value("format", ""), "pt");
  EXPECT_EQ(p.metadata.value("tessel_step", ""), "0");
  const auto want = hf_gpt2_layout(2, 16, 256, 8);
  ASSERT_EQ(p.tensors.size(), want.size());
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(p.tensors.count(name)) << name << " missing";
    EXPECT_EQ(p.tensors.at(name).shape, shape) << name;
    EXPECT_EQ(p.tensors.at(name).dtype, "F32") << name;
  }
  // The values: GPT-2's c_attn weight [in, out] is tessel's qkv weight as it is.
  for (const TensorSlot& t : whole_model_tensors(plan.model)) {
    const std::string name = t.name == "L1.attn.qkv.weight" ? "transformer.h.1.attn.c_attn.weight"
                             : t.name == "wte"              ? "transformer.wte.weight"
                             : t.name == "L0.mlp.fc2.weight" ? "transformer.h.0.mlp.c_proj.weight"
                                                            : "";
    if (name.empty()) continue;
    const ParsedTensor& stored = p.tensors.at(name);
    EXPECT_EQ(std::memcmp(p.data.data() + stored.begin, whole.data() + t.offset, t.size() * sizeof(float)), 0) << name;
  }
  // config.json next to it reads back as the same model (core's HF config reader).
  const Json config = read_json_file(path("config.json"));
  EXPECT_EQ(config.at("activation_function"), "gelu_new");
  EXPECT_EQ(config.at("layer_norm_epsilon").get<double>(), 1e-5);
  EXPECT_EQ(config.at("tie_word_embeddings"), true);
  const ModelSpec back = ModelSpec::from_hf_config(config, plan.model.name);
  EXPECT_EQ(back.layers, 2);
  EXPECT_EQ(back.hidden, 16);
  EXPECT_EQ(back.heads, 2);
  EXPECT_EQ(back.ffn_hidden, plan.model.ffn_hidden);
  EXPECT_EQ(back.vocab, 256);
  EXPECT_EQ(back.seq_len, 8);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().extension(), entry.path().filename() == "config.json" ? ".json" : ".safetensors")
        << "left behind: " << entry.path();
  }
}

TEST_F(Safetensors, Bf16ExportRoundsEachWeightToNearestEven) {
  const Plan plan = tiny_plan();
  const std::vector<float> whole = initial_weights(plan);
  const fs::path file = dir_ / "model.safetensors";
  write_gpt2_export(file.string(), plan.model, whole, SafetensorsDType::bf16, {});
  const Parsed p = parse(slurp(file));
  const ParsedTensor& wte = p.tensors.at("transformer.wte.weight");
  EXPECT_EQ(wte.dtype, "BF16");
  std::uint16_t first = 0;
  std::memcpy(&first, p.data.data() + wte.begin, 2);
  EXPECT_EQ(first, kernels::numeric::to_bf16(whole[0]));
  EXPECT_EQ(read_json_file(path("config.json")).at("torch_dtype"), "bfloat16");
  // And it reads back for --init as the rounded values.
  const std::vector<float> back = whole_model_from_gpt2(SafetensorsFile::read(file.string(), "--init"), plan.model);
  EXPECT_EQ(back[0], kernels::numeric::from_bf16(first));
}

// Export the initial weights of seed 7, start a run of seed 8 from them: every step's loss
// equals the seed-7 run's bit for bit; the seed-8 run without them differs.
TEST_F(Safetensors, AModelExportedAndReimportedTrainsOnBitIdentically) {
  const Plan plan = tiny_plan();
  const ReimportedTraining run = train_reimported(plan, path("model.safetensors"), 4, ExportFamily::gpt2);
  EXPECT_TRUE(bit_identical_losses(run));
  EXPECT_TRUE(run.another_seed_differs) << "another seed's run should not match";
  EXPECT_EQ(run.imported_weights, run.reference_weights);
}

// A GPU's vocabulary padding (each block a multiple of 128 rows) on one CPU rank: the
// tables hold 384 rows for a vocabulary of 300, yet the checkpoint's rank file, its gather,
// the safetensors export and config.json hold 300 and the padding stays 0; the export read
// back (--init) pads again, and trains like the same model on unpadded tables.
TEST_F(Safetensors, PaddedTablesKeepTheTrueVocabularyInEveryFileAndReadBack) {
  Plan plan = tiny_plan();
  plan.model.vocab = 300;
  const std::string text = synthetic_corpus(8192, 3);
  TrainerOptions padded;
  padded.seed = 7, padded.vocab_multiple = 128;
  TrainerOptions plain = padded;
  plain.vocab_multiple = 1;
  SingleRankCommunicator world, world_again, world_plain;
  ProcessGrid grid(plan.parallel, world), grid_again(plan.parallel, world_again), grid_plain(plan.parallel, world_plain);
  Trainer trainer(plan, grid, DataLoader(text, 4, 8), padded);
  EXPECT_EQ(trainer.padded_vocab(), 384);
  trainer.step();
  trainer.step();
  EXPECT_EQ(trainer.padding_magnitude(), 0.0f);
  const fs::path checkpoint = dir_ / "checkpoint";
  trainer.save(checkpoint.string());
  // Master weights and AdamW's two moments of the model's parameters, and nothing else.
  EXPECT_EQ(fs::file_size(checkpoint / step_directory_name(2) / rank_file_name(0)),
            kRankFileHeaderBytes + 3 * sizeof(float) * std::size_t(plan.model.parameter_count()));
  const std::vector<float> whole = trainer.whole_parameters();
  const CheckpointWeights gathered = read_checkpoint_weights(checkpoint.string());
  EXPECT_EQ(gathered.vocab_multiple, 128);
  EXPECT_EQ(gathered.whole, whole);
  const fs::path file = dir_ / "model.safetensors";
  write_gpt2_export(file.string(), plan.model, whole, SafetensorsDType::f32, {});
  EXPECT_EQ(parse(slurp(file)).tensors.at("transformer.wte.weight").shape, (std::vector<std::int64_t>{300, 16}));
  EXPECT_EQ(read_json_file(path("config.json")).at("vocab_size"), 300);
  Trainer again(plan, grid_again, DataLoader(text, 4, 8), padded), unpadded(plan, grid_plain, DataLoader(text, 4, 8), plain);
  for (Trainer* t : {&again, &unpadded})
    t->set_whole_parameters(whole_model_from_gpt2(SafetensorsFile::read(file.string(), "--init"), plan.model));
  EXPECT_EQ(again.whole_parameters(), whole);
  EXPECT_EQ(again.padding_magnitude(), 0.0f);
  for (int step = 0; step < 3; ++step) {
    const float got = again.step().loss, want = unpadded.step().loss;
    EXPECT_NEAR(got, want, 1e-6f * want) << "step " << step + 1;
  }
}

TEST_F(Safetensors, BadFilesAreRefusedInOneLineNamingTheTensor) {
  const Plan plan = tiny_plan();
  const std::string good = path("good.safetensors"), bytes = exported_tiny("good.safetensors");
  auto load = [&](const std::string& path, const Plan& for_plan) {
    return error_of([&] { whole_model_from_gpt2(SafetensorsFile::read(path, "--init"), for_plan.model); });
  };
  // Truncated: the last tensor's range runs past the end.
  const std::string truncated = write("truncated.safetensors", bytes.substr(0, bytes.size() - 4));
  EXPECT_NE(load(truncated, plan).find("lie outside"), std::string::npos) << load(truncated, plan);
  EXPECT_NE(load(truncated, plan).find(truncated), std::string::npos);
  // Not safetensors at all.
  const std::string text = write("text.safetensors", "hello, this is not a tensor file");
  EXPECT_NE(load(text, plan).find("not a safetensors file"), std::string::npos) << load(text, plan);
  // A model with another hidden size: the first tensor whose shape differs is named.
  Plan wider = plan;
  wider.model.hidden = 32;
  wider.model.ffn_hidden = 128;
  EXPECT_NE(load(good, wider).find("tensor transformer.wte.weight: shape [256,16] differs"), std::string::npos)
      << load(good, wider);
  // One layer more in the plan: the missing tensor is named.
  Plan deeper = plan;
  deeper.model.layers = 3;
  EXPECT_NE(load(good, deeper).find("tensor transformer.h.2.ln_1.weight: missing"), std::string::npos)
      << load(good, deeper);
  // One layer fewer: the extra tensor is named.
  Plan shallower = plan;
  shallower.model.layers = 1;
  EXPECT_NE(load(good, shallower).find("transformer.h.1."), std::string::npos) << load(good, shallower);
  EXPECT_NE(load(good, shallower).find("not in the plan's model"), std::string::npos);
  // A dtype tessel does not read: F32 relabelled I32 (same size) is named with its dtype.
  std::string relabelled = bytes;
  const std::size_t at = relabelled.find("\"F32\"");
  relabelled.replace(at, 5, "\"I32\"");
  const std::string wrong_dtype = write("dtype.safetensors", relabelled);
  EXPECT_NE(load(wrong_dtype, plan).find("dtype I32; F32 or BF16 is read"), std::string::npos) << load(wrong_dtype, plan);
  for (const std::string& message : {load(truncated, plan), load(text, plan), load(good, wider)}) {
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind("--init: ", 0), 0u) << message;
  }
}

// Damaged files (bytes of the header changed, the file cut anywhere) are refused with
// tessel::Error or read as some model, never anything else escaping: a small fuzz, fixed seed.
TEST_F(Safetensors, DamagedFilesOnlyEverGiveOneLineErrors) {
  const Plan plan = tiny_plan();
  const std::string good = path("good.safetensors"), bytes = exported_tiny("good.safetensors");
  std::uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= std::uint64_t(std::uint8_t(bytes[std::size_t(i)])) << (8 * i);
  std::mt19937_64 rng(11);
  const std::string file = path("damaged.safetensors");
  int refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string damaged = bytes;
    if (trial % 4 == 0) {
      damaged.resize(rng() % bytes.size());
    } else {
      for (int k = 0; k < 1 + int(rng() % 3); ++k) damaged[rng() % (8 + header_bytes)] = char("0123456789[]{},:\"\" -"[rng() % 18]);
    }
    std::ofstream(file, std::ios::binary | std::ios::trunc) << damaged;
    try {
      whole_model_from_gpt2(SafetensorsFile::read(file, "--init"), plan.model);
    } catch (const Error& error) {
      ++refused;
      EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "trial " << trial << ": " << error.what();
    }
  }
  EXPECT_GT(refused, 200);
}

// Hostile headers (issue 38): a shape nested 100,000 deep crashed the reader as its error
// line dumped the nested JSON; a key given twice is one the format disallows. NaN or
// infinite weights are refused at load, naming the file, the tensor and the element.
TEST_F(Safetensors, HostileHeadersAndNonFiniteWeightsAreOneLineNamingTheFile) {
  auto file_with_header = [&](const std::string& name, const std::string& header, std::size_t data_bytes) {
    std::string content;
    for (int i = 0; i < 8; ++i) content.push_back(char((std::uint64_t(header.size()) >> (8 * i)) & 0xff));
    content += header + std::string(data_bytes, '\0');
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  };
  const int deep = 100000;
  const std::string nested = file_with_header(
      "deep.safetensors",
      "{\"t\": {\"dtype\": \"F32\", \"shape\": " + std::string(deep, '[') + "1" + std::string(deep, ']') +
          ", \"data_offsets\": [0, 4]}}",
      4);
  const std::string twice = file_with_header(
      "twice.safetensors",
      R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
      4);
  const std::string wide = file_with_header(
      "wide.safetensors", "{\"t\": {\"dtype\": \"F32\", \"shape\": [" + std::string(50000, '1') + "], \"data_offsets\": [0, 4]}}", 4);
  for (const auto& [path, expected] : std::vector<std::pair<std::string, std::string>>{
           {nested, "nested deeper than 64"}, {twice, "appears twice"}, {wide, "number overflow"}}) {
    const std::string message = error_of([&] { SafetensorsFile::read(path, "--init"); });
    EXPECT_NE(message.find(expected), std::string::npos) << message.substr(0, 300);
    EXPECT_EQ(message.rfind("--init: " + path, 0), 0u) << message.substr(0, 300);
    EXPECT_LT(message.size(), 300u) << message.substr(0, 300);
  }

  const Plan plan = tiny_plan();
  std::vector<float> whole = initial_weights(plan);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    whole[5] = bad;
    const std::string file = path("nan.safetensors");
    write_gpt2_export(file, plan.model, whole, SafetensorsDType::f32, {});
    const std::string message =
        error_of([&] { whole_model_from_gpt2(SafetensorsFile::read(file, "--init"), plan.model); });
    EXPECT_NE(message.find("--init: " + file + ": tensor transformer."), std::string::npos) << message;
    EXPECT_NE(message.find(std::isnan(bad) ? "is NaN" : "is infinite"), std::string::npos) << message;
  }
}
