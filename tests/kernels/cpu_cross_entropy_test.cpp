// The CPU cross-entropy ops with vocabulary padding (columns at and past valid_cols) and
// the fused softmax-cross-entropy: padding never changes the loss or the real columns'
// gradients whatever it holds, padded columns get gradient 0, and the fused op equals
// the phases on one rank bit for bit, in place or not, in fp32 and bf16 storage.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu_reference.hpp"
#include "tessel/kernels/numeric.hpp"

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::kernels::reference;

namespace {

constexpr int kRows = 5, kVocab = 37, kPadded = 48;  // 11 padding columns

// Logits [kRows x kPadded]: the vocabulary's values, then `padding` in every padded column.
std::vector<float> padded_logits(const std::vector<float>& vocabulary, float padding) {
  std::vector<float> out(std::size_t(kRows) * kPadded, padding);
  for (int r = 0; r < kRows; ++r)
    std::memcpy(&out[std::size_t(r) * kPadded], &vocabulary[std::size_t(r) * kVocab], kVocab * sizeof(float));
  return out;
}

struct LossAndGradient {
  double loss = 0;
  std::vector<float> dlogits;
};

// The three phases and the backward on one rank holding every column.
LossAndGradient phases(const std::vector<float>& logits, const std::vector<std::int32_t>& targets, int cols,
                       int valid_cols, float scale) {
  std::vector<float> top(kRows, kNaN), sum(kRows, kNaN), target(kRows, kNaN);
  K.cross_entropy_max(logits.data(), top.data(), kRows, cols, valid_cols);
  K.cross_entropy_sums(logits.data(), targets.data(), top.data(), sum.data(), target.data(), kRows, cols, valid_cols, 0);
  LossAndGradient out;
  cpu_backend().cross_entropy_loss(Stream::compute, top.data(), sum.data(), target.data(), kRows, &out.loss);
  out.dlogits.assign(logits.size(), kNaN);
  K.cross_entropy_backward(logits.data(), targets.data(), top.data(), sum.data(), out.dlogits.data(), kRows, cols,
                           valid_cols, 0, scale);
  return out;
}

LossAndGradient fused(const std::vector<float>& logits, const std::vector<std::int32_t>& targets, int cols,
                      int valid_cols, float scale) {
  LossAndGradient out;
  out.dlogits.assign(logits.size(), kNaN);
  K.cross_entropy_fused(logits.data(), targets.data(), out.dlogits.data(), kRows, cols, valid_cols, scale, &out.loss);
  return out;
}

// Row r's first kVocab gradients.
std::vector<float> real_columns(const std::vector<float>& dlogits, int cols) {
  std::vector<float> out;
  for (int r = 0; r < kRows; ++r)
    out.insert(out.end(), dlogits.begin() + long(r) * cols, dlogits.begin() + long(r) * cols + kVocab);
  return out;
}

class CrossEntropyPadding : public ::testing::Test {
 protected:
  std::mt19937 rng{11};
  const std::vector<float> vocabulary = random_vector(std::size_t(kRows) * kVocab, rng, 4.0f);
  const std::vector<std::int32_t> targets{0, 36, 5, 17, 36};
};

}  // namespace

TEST_F(CrossEntropyPadding, PaddedColumnsNeverChangeTheLossOrTheRealGradients) {
  const float scale = 0.125f;
  const LossAndGradient unpadded = phases(vocabulary, targets, kVocab, kVocab, scale);
  // Whatever the padding holds (zeros as the padded table gives, or logits that would
  // dominate the softmax were they counted), the loss and the real columns are the same bits.
  for (const float padding : {0.0f, 50.0f, -50.0f}) {
    for (const bool use_fused : {false, true}) {
      const std::vector<float> logits = padded_logits(vocabulary, padding);
      const LossAndGradient got =
          use_fused ? fused(logits, targets, kPadded, kVocab, scale) : phases(logits, targets, kPadded, kVocab, scale);
      EXPECT_EQ(got.loss, unpadded.loss) << "padding " << padding << (use_fused ? " fused" : " phases");
      EXPECT_EQ(real_columns(got.dlogits, kPadded), unpadded.dlogits) << "padding " << padding;
      for (int r = 0; r < kRows; ++r)
        for (int j = kVocab; j < kPadded; ++j) ASSERT_EQ(got.dlogits[std::size_t(r) * kPadded + j], 0.0f) << r << ", " << j;
    }
  }
}

TEST_F(CrossEntropyPadding, ARankHoldingOnlyPaddingAddsNothing) {
  // A vocabulary shard that is all padding: its max is -inf (the group's max ignores it),
  // its sums are 0, and its gradient is 0 everywhere.
  const std::vector<float> logits(std::size_t(kRows) * 8, 3.0f);
  std::vector<float> top(kRows, kNaN), sum(kRows, kNaN), target(kRows, kNaN), dlogits(logits.size(), kNaN);
  K.cross_entropy_max(logits.data(), top.data(), kRows, 8, 0);
  const std::vector<float> group_max(kRows, 2.0f), group_sum(kRows, 7.0f);
  K.cross_entropy_sums(logits.data(), targets.data(), group_max.data(), sum.data(), target.data(), kRows, 8, 0, 40);
  K.cross_entropy_backward(logits.data(), targets.data(), group_max.data(), group_sum.data(), dlogits.data(), kRows, 8,
                           0, 40, 1.0f);
  for (int r = 0; r < kRows; ++r) {
    EXPECT_EQ(top[r], -INFINITY);
    EXPECT_EQ(sum[r], 0.0f);
    EXPECT_EQ(target[r], 0.0f);
  }
  for (float d : dlogits) ASSERT_EQ(d, 0.0f);
}

TEST_F(CrossEntropyPadding, FusedEqualsThePhasesBitForBitAndInPlace) {
  const std::vector<float> logits = padded_logits(vocabulary, 0.0f);
  const LossAndGradient want = phases(logits, targets, kPadded, kVocab, 0.5f);
  const LossAndGradient got = fused(logits, targets, kPadded, kVocab, 0.5f);
  EXPECT_EQ(got.loss, want.loss);
  EXPECT_EQ(got.dlogits, want.dlogits);
  // In place: the gradient replaces the logits; the loss adds onto what the sum held.
  std::vector<float> in_place = logits;
  double loss = 1.5;
  K.cross_entropy_fused(in_place.data(), targets.data(), in_place.data(), kRows, kPadded, kVocab, 0.5f, &loss);
  EXPECT_EQ(loss, 1.5 + want.loss);
  EXPECT_EQ(in_place, want.dlogits);
  // And the loss is the mean cross-entropy's sum in double precision.
  double expected = 0;
  for (int r = 0; r < kRows; ++r) {
    double total = 0;
    for (int j = 0; j < kVocab; ++j) total += std::exp(double(vocabulary[std::size_t(r) * kVocab + j]));
    expected += std::log(total) - vocabulary[std::size_t(r) * kVocab + targets[std::size_t(r)]];
  }
  EXPECT_NEAR(got.loss, expected, 1e-5 * std::abs(expected));
}

TEST_F(CrossEntropyPadding, FusedInPlaceInBf16StorageEqualsOutOfPlace) {
  Backend& cpu = cpu_backend();
  const std::vector<float> logits = padded_logits(vocabulary, 0.0f);
  const std::size_t n = logits.size();
  std::vector<std::uint16_t> stored(n), out_of_place(n, 0xffff);
  for (std::size_t i = 0; i < n; ++i) stored[i] = numeric::to_bf16(logits[i]);
  double loss_apart = 0, loss_in_place = 0;
  cpu.cross_entropy_fused(Stream::compute, CRef{stored.data(), DType::bf16}, targets.data(),
                          Ref{out_of_place.data(), DType::bf16}, kRows, kPadded, kVocab, 1.0f, &loss_apart);
  cpu.cross_entropy_fused(Stream::compute, CRef{stored.data(), DType::bf16}, targets.data(),
                          Ref{stored.data(), DType::bf16}, kRows, kPadded, kVocab, 1.0f, &loss_in_place);
  EXPECT_EQ(loss_in_place, loss_apart);
  EXPECT_EQ(stored, out_of_place);
}
