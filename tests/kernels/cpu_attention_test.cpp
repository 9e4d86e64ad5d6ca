// The CPU attention, cross-entropy and embedding kernels against double-precision
// references, and the equalities sequence- and vocab-parallel ranks rely on: a later
// block of query rows equals those rows of the whole softmax, and a vocabulary split in
// column blocks gives the whole cross-entropy. Outputs are poisoned with NaN first.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu_reference.hpp"

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::kernels::reference;

// Attention as the executor runs it: scores = Q K^T per head (GEMM), the causal softmax
// kernel, out = P V (GEMM); backward through the same kernels.
static std::vector<float> attention_through_kernels(const std::vector<float>& q, const std::vector<float>& k,
                                             const std::vector<float>& v, int bh, int s, int d,
                                             std::vector<float>& probs) {
  std::vector<float> scores(std::size_t(bh) * s * s, kNaN), out(q.size(), kNaN);
  probs.assign(scores.size(), kNaN);
  const std::size_t block = std::size_t(s) * d, square = std::size_t(s) * s;
  for (int h = 0; h < bh; ++h) K.gemm(false, true, s, s, d, 1.0f, &q[h * block], &k[h * block], 0.0f, &scores[h * square]);
  K.causal_softmax_forward(scores.data(), probs.data(), bh, s, s, 0, 1.0f / std::sqrt(float(d)));
  for (int h = 0; h < bh; ++h) K.gemm(false, false, s, d, s, 1.0f, &probs[h * square], &v[h * block], 0.0f, &out[h * block]);
  return out;
}

TEST(CpuKernels, CausalAttentionThroughGemmAndSoftmaxForwardAndBackward) {
  std::mt19937 rng(4);
  const int bh = 3, s = 11, d = 8;
  const std::size_t n = std::size_t(bh) * s * d, block = std::size_t(s) * d, square = std::size_t(s) * s;
  const auto q = random_vector(n, rng), k = random_vector(n, rng), v = random_vector(n, rng), w = random_vector(n, rng);
  std::vector<float> probs;
  const std::vector<float> out = attention_through_kernels(q, k, v, bh, s, d, probs);
  const auto qd = to_double(q), kd = to_double(k), vd = to_double(v), wd = to_double(w);
  EXPECT_LT(max_relative_error(out, attention_ref(qd, kd, vd, bh, s, d)), 1e-5);
  // Backward: dP = dO V^T, dV = P^T dO, dS = softmax backward, dQ = dS K, dK = dS^T Q.
  std::vector<float> dprobs(probs.size(), kNaN), dscores(probs.size(), kNaN), dq(n, kNaN), dk(n, kNaN), dv(n, kNaN);
  for (std::size_t h = 0; h < std::size_t(bh); ++h) {
    K.gemm(false, true, s, s, d, 1.0f, &w[h * block], &v[h * block], 0.0f, &dprobs[h * square]);
    K.gemm(true, false, s, d, s, 1.0f, &probs[h * square], &w[h * block], 0.0f, &dv[h * block]);
  }
  K.causal_softmax_backward(probs.data(), dprobs.data(), dscores.data(), std::int64_t(bh) * s, s, 1.0f / std::sqrt(float(d)));
  for (std::size_t h = 0; h < std::size_t(bh); ++h) {
    K.gemm(false, false, s, d, s, 1.0f, &dscores[h * square], &k[h * block], 0.0f, &dq[h * block]);
    K.gemm(true, false, s, d, s, 1.0f, &dscores[h * square], &q[h * block], 0.0f, &dk[h * block]);
  }
  EXPECT_LT(max_relative_error(dq, numeric_gradient([&](auto in) { return attention_ref(in, kd, vd, bh, s, d); }, qd, wd)),
            1e-4);
  EXPECT_LT(max_relative_error(dk, numeric_gradient([&](auto in) { return attention_ref(qd, in, vd, bh, s, d); }, kd, wd)),
            1e-4);
  EXPECT_LT(max_relative_error(dv, numeric_gradient([&](auto in) { return attention_ref(qd, kd, in, bh, s, d); }, vd, wd)),
            1e-4);
  // Causality: the first position's output is its own value vector; masked probabilities are 0.
  for (int c = 0; c < d; ++c) EXPECT_FLOAT_EQ(out[std::size_t(c)], v[std::size_t(c)]);
  EXPECT_EQ(probs[1], 0.0f);
}

// The rows of a later block of queries (first_row > 0) equal those rows of the whole
// square softmax: what a sequence-parallel rank computes for its share of the queries.
TEST(CpuKernels, CausalSoftmaxOfALaterBlockOfRowsEqualsThoseRowsOfTheWhole) {
  std::mt19937 rng(13);
  const int batch = 2, seq = 12, first = 8, rows = 4;
  const auto scores = random_vector(std::size_t(batch) * seq * seq, rng, 2.0f);
  std::vector<float> whole(scores.size(), kNaN), block(std::size_t(batch) * rows * seq, kNaN);
  K.causal_softmax_forward(scores.data(), whole.data(), batch, seq, seq, 0, 0.5f);
  std::vector<float> block_scores(block.size());
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < seq; ++j)
        block_scores[(std::size_t(b) * rows + i) * seq + j] = scores[(std::size_t(b) * seq + first + i) * seq + j];
  K.causal_softmax_forward(block_scores.data(), block.data(), batch, rows, seq, first, 0.5f);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < seq; ++j) {
        EXPECT_EQ(block[(std::size_t(b) * rows + i) * seq + j], whole[(std::size_t(b) * seq + first + i) * seq + j]);
      }
}

// The vocabulary split in two column blocks, reduced between the phases as ranks would,
// gives the loss and gradient of the whole softmax.
TEST(CpuKernels, VocabParallelCrossEntropyEqualsTheWholeSoftmax) {
  std::mt19937 rng(5);
  const int rows = 6, vocab = 54, half = vocab / 2;
  const auto logits = random_vector(std::size_t(rows) * vocab, rng, 3.0f);
  const std::vector<std::int32_t> targets{0, 53, 7, 27, 31, 26};
  std::vector<std::vector<float>> blocks(2, std::vector<float>(std::size_t(rows) * half));
  for (int part = 0; part < 2; ++part)
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < half; ++j) blocks[part][std::size_t(r) * half + j] = logits[std::size_t(r) * vocab + part * half + j];
  std::vector<float> top(rows, -INFINITY), sum(rows, 0.0f), target(rows, 0.0f);
  for (int part = 0; part < 2; ++part) {
    std::vector<float> part_max(rows, kNaN);
    K.cross_entropy_max(blocks[part].data(), part_max.data(), rows, half, half);
    for (int r = 0; r < rows; ++r) top[r] = std::max(top[r], part_max[r]);
  }
  for (int part = 0; part < 2; ++part) {
    std::vector<float> part_sum(rows, kNaN), part_target(rows, kNaN);
    K.cross_entropy_sums(blocks[part].data(), targets.data(), top.data(), part_sum.data(), part_target.data(), rows,
                         half, half, part * half);
    for (int r = 0; r < rows; ++r) sum[r] += part_sum[r], target[r] += part_target[r];
  }
  std::vector<float> loss(rows), dlogits(logits.size(), kNaN);
  for (int r = 0; r < rows; ++r) loss[r] = std::log(sum[r]) + top[r] - target[r];
  for (int part = 0; part < 2; ++part) {
    std::vector<float> part_grad(blocks[part].size(), kNaN);
    K.cross_entropy_backward(blocks[part].data(), targets.data(), top.data(), sum.data(), part_grad.data(), rows, half,
                             half, part * half, 0.25f);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < half; ++j) dlogits[std::size_t(r) * vocab + part * half + j] = part_grad[std::size_t(r) * half + j];
  }
  std::vector<double> want_loss(rows), want_grad(logits.size());
  for (int r = 0; r < rows; ++r) {
    double total = 0;
    for (int j = 0; j < vocab; ++j) total += std::exp(double(logits[std::size_t(r) * vocab + j]));
    want_loss[r] = std::log(total) - logits[std::size_t(r) * vocab + targets[r]];
    for (int j = 0; j < vocab; ++j) {
      want_grad[std::size_t(r) * vocab + j] =
          0.25 * (std::exp(double(logits[std::size_t(r) * vocab + j])) / total - (j == targets[r] ? 1.0 : 0.0));
    }
  }
  EXPECT_LT(max_relative_error(loss, want_loss), 1e-5);
  EXPECT_LT(max_relative_error(dlogits, want_grad), 1e-5);
}

TEST(CpuKernels, EmbeddingGathersAndAccumulatesWithinItsVocabularyShard) {
  std::mt19937 rng(6);
  const int vocab = 10, dim = 4;
  const auto table = random_vector(std::size_t(vocab) * dim, rng);
  const std::vector<std::int32_t> tokens{3, 9, 3, 0};
  std::vector<float> out(tokens.size() * dim, kNaN);
  K.embedding_forward(tokens.data(), table.data(), out.data(), int(tokens.size()), dim, 0, vocab);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    for (int c = 0; c < dim; ++c) EXPECT_EQ(out[i * dim + c], table[std::size_t(tokens[i]) * dim + c]);
  }
  std::vector<float> dout(out.size(), 1.0f), dtable(table.size(), 0.5f);
  K.embedding_backward(tokens.data(), dout.data(), dtable.data(), int(tokens.size()), dim, 0, vocab);
  EXPECT_FLOAT_EQ(dtable[3 * dim], 2.5f);  // token 3 twice, accumulated onto 0.5
  EXPECT_FLOAT_EQ(dtable[9 * dim], 1.5f);
  EXPECT_FLOAT_EQ(dtable[5 * dim], 0.5f);  // untouched rows keep their value
  // The shard of rows [5, 10): token 9 is its row 4, tokens 3 and 0 are another rank's.
  std::vector<float> shard_out(out.size(), kNaN), shard_grad(std::size_t(5) * dim, 0.0f);
  K.embedding_forward(tokens.data(), table.data() + 5 * dim, shard_out.data(), int(tokens.size()), dim, 5, 5);
  EXPECT_EQ(shard_out[dim], table[9 * dim]);
  EXPECT_EQ(shard_out[0], 0.0f);
  K.embedding_backward(tokens.data(), dout.data(), shard_grad.data(), int(tokens.size()), dim, 5, 5);
  EXPECT_FLOAT_EQ(shard_grad[4 * dim], 1.0f);
  EXPECT_FLOAT_EQ(shard_grad[0], 0.0f);
}
