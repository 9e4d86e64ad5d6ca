// The single-rank GPT: deterministic initialisation, a backward that matches the
// derivative of its forward tensor by tensor, and a model that learns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "tessel/executor/gpt.hpp"

using namespace tessel;
using namespace tessel::executor;

namespace {
ModelSpec tiny_model(int layers, int hidden, int heads, int vocab, int seq) {
  ModelSpec m;
  m.name = "tiny";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.ffn_hidden = 4 * hidden;
  m.vocab = vocab;
  m.seq_len = seq;
  return m;
}

std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, std::mt19937& rng) {
  std::vector<std::int32_t> out(n);
  for (auto& t : out) t = std::int32_t(rng() % std::uint32_t(vocab));
  return out;
}
}  // namespace

TEST(Gpt, SameSeedSameModel) {
  const ModelSpec m = tiny_model(2, 16, 2, 32, 8);
  EXPECT_EQ(Gpt(m, 7).parameters(), Gpt(m, 7).parameters());
  EXPECT_NE(Gpt(m, 7).parameters(), Gpt(m, 8).parameters());
  // Tensors are seeded by name: a deeper model shares its first layers' initial weights.
  const Gpt shallow(m, 7), deep(tiny_model(3, 16, 2, 32, 8), 7);
  const auto& a = shallow.slices()[2];
  EXPECT_EQ(a.name, deep.slices()[2].name);
  EXPECT_TRUE(std::equal(shallow.parameters().begin() + long(a.offset), shallow.parameters().begin() + long(a.offset + a.size),
                         deep.parameters().begin() + long(deep.slices()[2].offset)));
  EXPECT_EQ(Gpt(m, 7).parameters().size(), std::size_t(m.parameter_count()));
}

TEST(Gpt, BackwardMatchesTheDerivativeOfTheForwardPerTensor) {
  const ModelSpec m = tiny_model(2, 16, 2, 32, 8);
  Gpt model(m, 3);
  std::mt19937 rng(11);
  const int batch = 2, seq = 8;
  const auto tokens = random_tokens(std::size_t(batch) * seq, m.vocab, rng);
  const auto targets = random_tokens(tokens.size(), m.vocab, rng);
  model.zero_gradients();
  model.forward_backward(tokens.data(), targets.data(), batch, seq);
  const kernels::FloatBuffer grads = model.gradients();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const ParameterSlice& slice : model.slices()) {
    // A random direction inside this tensor only, so small tensors are checked too.
    std::vector<float> direction(slice.size);
    double norm = 0;
    for (auto& u : direction) {
      u = normal(rng);
      norm += double(u) * u;
    }
    for (auto& u : direction) u = float(u / std::sqrt(norm));
    double analytic = 0;
    for (std::size_t i = 0; i < slice.size; ++i) analytic += double(grads[slice.offset + i]) * direction[i];
    const float step = 1e-2f;
    auto& params = model.parameters();
    const std::vector<float> saved(params.begin() + long(slice.offset), params.begin() + long(slice.offset + slice.size));
    for (std::size_t i = 0; i < slice.size; ++i) params[slice.offset + i] = saved[i] + step * direction[i];
    const double up = model.loss(tokens.data(), targets.data(), batch, seq);
    for (std::size_t i = 0; i < slice.size; ++i) params[slice.offset + i] = saved[i] - step * direction[i];
    const double down = model.loss(tokens.data(), targets.data(), batch, seq);
    std::copy(saved.begin(), saved.end(), params.begin() + long(slice.offset));
    const double numeric = (up - down) / (2 * step);
    EXPECT_NEAR(analytic, numeric, 2e-2 * std::abs(numeric) + 2e-4) << slice.name;
  }
}

TEST(Gpt, LossHalvesWithin200StepsOnTheSyntheticCorpus) {
  const ModelSpec m = tiny_model(2, 64, 4, 256, 32);
  Gpt model(m, 1);
  const std::string text = synthetic_corpus(1 << 16, 5);
  const int batch = 8, seq = 32;
  std::mt19937 rng(2);
  kernels::FloatBuffer moment1(model.parameters().size(), 0.0f), moment2(moment1.size(), 0.0f);
  kernels::AdamWParams adam;
  adam.lr = 3e-3f;
  float first = 0, last = 0;
  for (int step = 1; step <= 200; ++step) {
    std::vector<std::int32_t> tokens(std::size_t(batch) * seq), targets(tokens.size());
    for (int b = 0; b < batch; ++b) {
      const std::size_t start = rng() % (text.size() - seq - 1);
      for (int s = 0; s < seq; ++s) {
        tokens[std::size_t(b * seq + s)] = static_cast<unsigned char>(text[start + s]);
        targets[std::size_t(b * seq + s)] = static_cast<unsigned char>(text[start + s + 1]);
      }
    }
    model.zero_gradients();
    const float loss = model.forward_backward(tokens.data(), targets.data(), batch, seq);
    adam.step = step;
    kernels::cpu_backend().adamw_step(model.parameters().data(), model.gradients().data(), moment1.data(),
                                      moment2.data(), std::int64_t(moment1.size()), adam);
    if (step == 1) first = loss;
    last = loss;
  }
  EXPECT_NEAR(first, std::log(256.0f), 0.1f);  // an untrained model guesses uniformly
  EXPECT_LT(last, first / 2) << "first " << first << " last " << last;
}

TEST(Gpt, TrainingIsBitForBitRepeatable) {
  // Two models from the same seed, trained on the same batches with buffers allocated at
  // different addresses (64-byte aligned), end with identical weights.
  const ModelSpec m = tiny_model(2, 64, 4, 256, 32);
  const std::string text = synthetic_corpus(1 << 14, 5);
  auto train = [&](int warm_up_allocations) {
    std::vector<std::vector<char>> noise;  // shifts where later buffers land
    for (int i = 0; i < warm_up_allocations; ++i) noise.emplace_back(std::size_t(97 * (i + 1)));
    Gpt model(m, 1);
    kernels::FloatBuffer moment1(model.parameters().size(), 0.0f), moment2(moment1.size(), 0.0f);
    kernels::AdamWParams adam;
    for (int step = 1; step <= 3; ++step) {
      std::vector<std::int32_t> tokens(4 * 32), targets(tokens.size());
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = static_cast<unsigned char>(text[std::size_t(step) * 200 + i]);
        targets[i] = static_cast<unsigned char>(text[std::size_t(step) * 200 + i + 1]);
      }
      model.zero_gradients();
      model.forward_backward(tokens.data(), targets.data(), 4, 32);
      adam.step = step;
      kernels::cpu_backend().adamw_step(model.parameters().data(), model.gradients().data(), moment1.data(),
                                        moment2.data(), std::int64_t(moment1.size()), adam);
    }
    return model.parameters();
  };
  const auto first = train(0), second = train(7);
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
}
