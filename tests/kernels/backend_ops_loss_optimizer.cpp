// Op-table cases for the LM head, the embedding and the optimizers. Token ids include ids
// outside this rank's vocabulary shard (zero rows, no gradient) and repeats (summed in
// token order); cross-entropy shards come whole, padded and all padding; segment tables
// hold more segments than one GPU launch takes, an empty one, and ones longer than a block.
#include <cmath>

#include "backend_ops_cases.hpp"

namespace tessel::kernels::ops_test {

namespace {
constexpr int kLossRows = 10, kVocabCols = 301, kVocabStart = 500;
constexpr std::int64_t kLogits = std::int64_t(kLossRows) * kVocabCols;
// The padded variants: the shard's last 13 columns are vocabulary padding (the executor
// pads the table so GEMM widths suit the device); "empty.": a shard of padding only.
struct Shard {
  int valid_cols;
  const char* tag;
};
constexpr Shard kShards[] = {{kVocabCols, ""}, {kVocabCols - 13, "padded."}, {0, "empty."}};

// Targets mostly inside [kVocabStart, kVocabStart + kVocabCols), some outside.
std::int32_t* targets(OpRun& r) { return r.tokens(kLossRows, kVocabStart - 40, kVocabStart + kVocabCols + 40); }
}  // namespace

void run_cross_entropy_max(OpRun& r) {
  for (const Shard& shard : kShards) {
    const CRef logits = r.in(kLogits, -6.0f, 6.0f);
    r.backend().cross_entropy_max(r.stream(), logits, r.out_f32(std::string(shard.tag) + "row_max", kLossRows), kLossRows,
                                  kVocabCols, shard.valid_cols);
  }
}

void run_cross_entropy_sums(OpRun& r) {
  for (const Shard& shard : kShards) {
    const std::string tag = shard.tag;
    const CRef logits = r.in(kLogits, -6.0f, 6.0f);
    const std::int32_t* target = targets(r);
    // A shared maximum from other ranks may exceed this block's: draw it above the logits.
    const float* row_max = r.in_f32(kLossRows, 6.0f, 7.0f);
    r.backend().cross_entropy_sums(r.stream(), logits, target, row_max, r.out_f32(tag + "sum_exp", kLossRows),
                                   r.out_f32(tag + "target_logit", kLossRows), kLossRows, kVocabCols, shard.valid_cols,
                                   kVocabStart);
  }
}

void run_cross_entropy_loss(OpRun& r) {
  // More rows than one block of threads, so the tree reduction has several levels.
  constexpr int rows = 1500;
  const float* row_max = r.in_f32(rows, 2.0f, 6.0f);
  const float* sum_exp = r.in_f32(rows, 1.0f, 300.0f);
  const float* target_logit = r.in_f32(rows, -6.0f, 6.0f);
  double* loss_sum = static_cast<double*>(r.inout("loss_sum", 1, DType::f64, 10.0f, 20.0f).data);
  r.backend().cross_entropy_loss(r.stream(), row_max, sum_exp, target_logit, rows, loss_sum);
}

void run_cross_entropy_backward(OpRun& r) {
  for (const Shard& shard : kShards) {
    const CRef logits = r.in(kLogits, -6.0f, 6.0f);
    const std::int32_t* target = targets(r);
    const float* row_max = r.in_f32(kLossRows, 6.0f, 7.0f);
    const float* sum_exp = r.in_f32(kLossRows, 20.0f, 40.0f);
    r.backend().cross_entropy_backward(r.stream(), logits, target, row_max, sum_exp,
                                       r.out(std::string(shard.tag) + "dlogits", kLogits), kLossRows, kVocabCols,
                                       shard.valid_cols, kVocabStart, 1.0f / kLossRows);
  }
}

namespace {
// Whole rows of logits [rows x cols], the first valid_cols the vocabulary: written in place
// over the logits (as the executor calls it) and, unless `in_place_only`, apart.
void fused_case(OpRun& r, const std::string& tag, int rows, int cols, int valid_cols, bool in_place_only = false) {
  const std::int64_t n = std::int64_t(rows) * cols;
  const std::int32_t* target = r.tokens(rows, 0, valid_cols);
  const float scale = 1.0f / float(rows);
  if (!in_place_only) {
    const CRef logits = r.in(n, -6.0f, 6.0f);
    double* loss_sum = static_cast<double*>(r.inout(tag + "loss_sum", 1, DType::f64, 10.0f, 20.0f).data);
    r.backend().cross_entropy_fused(r.stream(), logits, target, r.out(tag + "dlogits", n), rows, cols, valid_cols,
                                    scale, loss_sum);
  }
  const Ref in_place = r.inout(tag + "in_place.dlogits", n, r.compute(), -6.0f, 6.0f);
  double* in_place_loss = static_cast<double*>(r.inout(tag + "in_place.loss_sum", 1, DType::f64, 0.0f, 1.0f).data);
  r.backend().cross_entropy_fused(r.stream(), in_place, target, in_place, rows, cols, valid_cols, scale, in_place_loss);
}
}  // namespace

void run_cross_entropy_fused(OpRun& r) {
  // An odd width (no whole number of 16-byte vectors: the elementwise path), whole and
  // padded; then a width of whole vectors in every type (the vector path), padded.
  fused_case(r, "", kLossRows, kVocabCols, kVocabCols);
  fused_case(r, "padded.", kLossRows, kVocabCols, kVocabCols - 13);
  fused_case(r, "vectors.", 7, 256, 250);
  if (!r.device_shapes()) return;
  // GPT-2's head on one GPU: 50,257 tokens padded to 50,304 (393 x 128), 2048 rows, in
  // place (100 M elements: the one large case); and the unpadded width, no whole number
  // of vectors.
  fused_case(r, "gpt2.", 2048, 50304, 50257, true);
  fused_case(r, "gpt2_unpadded.", 64, 50257, 50257);
}

namespace {
constexpr int kTokens = 67, kDim = 45, kTableRows = 23, kTableStart = 40;
}  // namespace

void run_embedding_forward(OpRun& r) {
  const std::int32_t* tokens = r.tokens(kTokens, kTableStart - 5, kTableStart + kTableRows + 5);
  const CRef table = r.in(std::int64_t(kTableRows) * kDim);
  r.backend().embedding_forward(r.stream(), tokens, table, r.out("out", std::int64_t(kTokens) * kDim), kTokens, kDim,
                                kTableStart, kTableRows);
}

void run_embedding_backward(OpRun& r) {
  // 67 tokens over 33 ids: most rows get several tokens.
  const std::int32_t* tokens = r.tokens(kTokens, kTableStart - 5, kTableStart + kTableRows + 5);
  const CRef dout = r.in(std::int64_t(kTokens) * kDim);
  float* table_gradient = r.inout_f32("table_gradient", std::int64_t(kTableRows) * kDim);
  r.backend().embedding_backward(r.stream(), tokens, dout, table_gradient, kTokens, kDim, kTableStart, kTableRows);
  // Long runs of one id (chains longer than a GPU block walks at once): 600 tokens, 2 ids.
  constexpr int many = 600;
  const std::int32_t* repeated = r.tokens(many, kTableStart, kTableStart + 2);
  const CRef long_dout = r.in(std::int64_t(many) * kDim);
  r.backend().embedding_backward(r.stream(), repeated, long_dout, table_gradient, many, kDim, kTableStart, kTableRows);
}

namespace {
constexpr std::int64_t kParams = 12003;

// Segments over [0, kParams): 70 segments (more than one launch's 64), one empty, one
// long (several of a GPU's 4096-element pieces), the rest short and uneven.
std::vector<Segment> segments() {
  std::vector<Segment> table;
  std::int64_t at = 0;
  table.push_back({at, 9600}), at += 9600;
  table.push_back({at, 0});
  for (int i = 0; i < 68; ++i) {
    const std::int64_t size = 5 + (i * 7) % 31;
    table.push_back({at, size}), at += size;
  }
  table.back().size += kParams - at;  // the last reaches the end
  return table;
}
}  // namespace

void run_adamw_step(OpRun& r) {
  for (const bool scaled : {false, true}) {
    const std::string tag = scaled ? "scaled." : "";
    AdamWParams p;
    p.lr = 1e-2f, p.weight_decay = 0.1f, p.step = scaled ? 7 : 1;
    const float* grad = r.in_f32(kParams);
    const float* grad_scale = scaled ? r.in_f32(1, 0.2f, 0.8f) : nullptr;
    float* param = r.inout_f32(tag + "param", kParams);
    float* m = r.inout_f32(tag + "m", kParams, -0.1f, 0.1f);
    float* v = r.inout_f32(tag + "v", kParams, 0.0f, 0.01f);
    r.backend().adamw_step(r.stream(), param, grad, m, v, kParams, p, grad_scale);
  }
  if (!r.device_shapes()) return;
  // One float past each allocation: no 16-byte alignment, the GPU's element path.
  AdamWParams p;
  p.lr = 1e-2f, p.weight_decay = 0.1f, p.step = 3;
  const float* grad = r.in_f32(kParams + 1) + 1;
  float* param = r.inout_f32("unaligned.param", kParams + 1) + 1;
  float* m = r.inout_f32("unaligned.m", kParams + 1, -0.1f, 0.1f) + 1;
  float* v = r.inout_f32("unaligned.v", kParams + 1, 0.0f, 0.01f) + 1;
  r.backend().adamw_step(r.stream(), param, grad, m, v, kParams, p, nullptr);
}

void run_lamb_update(OpRun& r) {
  for (const bool scaled : {false, true}) {
    const std::string tag = scaled ? "scaled." : "";
    LambParams p;
    p.weight_decay = 0.01f, p.step = scaled ? 3 : 1;
    const float* param = r.in_f32(kParams);
    const float* grad = r.in_f32(kParams);
    const float* grad_scale = scaled ? r.in_f32(1, 0.2f, 0.8f) : nullptr;
    float* m = r.inout_f32(tag + "m", kParams, -0.1f, 0.1f);
    float* v = r.inout_f32(tag + "v", kParams, 0.0f, 0.01f);
    r.backend().lamb_update(r.stream(), param, grad, m, v, r.out_f32(tag + "update", kParams), kParams, p, grad_scale);
  }
}

void run_lars_update(OpRun& r) {
  for (const bool scaled : {false, true}) {
    const std::string tag = scaled ? "scaled." : "";
    LarsParams p;
    p.weight_decay = 1e-4f;
    const float* param = r.in_f32(kParams);
    const float* grad = r.in_f32(kParams);
    const float* grad_scale = scaled ? r.in_f32(1, 0.2f, 0.8f) : nullptr;
    r.backend().lars_update(r.stream(), param, grad, r.out_f32(tag + "update", kParams), kParams, p, grad_scale);
  }
}

void run_segment_norms(OpRun& r) {
  const std::vector<Segment> table = segments();
  const float* param = r.in_f32(kParams);
  const float* update = r.in_f32(kParams);
  float* norms = r.out_f32("norms", std::int64_t(2 * table.size()));
  r.backend().segment_norms(r.stream(), param, update, table, norms);
}

void run_lamb_apply(OpRun& r) {
  const std::vector<Segment> table = segments();
  float* param = r.inout_f32("param", kParams);
  const float* update = r.in_f32(kParams);
  // Norms as the caller's sums leave them; the empty segment's are 0 (trust ratio 1).
  const float* norms = r.in_f32(std::int64_t(2 * table.size()), 0.5f, 40.0f);
  r.backend().lamb_apply(r.stream(), param, update, table, norms, 1e-2f);
}

void run_lars_apply(OpRun& r) {
  const std::vector<Segment> table = segments();
  LarsParams p;
  p.lr = 0.5f, p.trust_coefficient = 0.02f;
  float* param = r.inout_f32("param", kParams);
  const float* update = r.in_f32(kParams);
  float* momentum = r.inout_f32("momentum", kParams, -0.1f, 0.1f);
  std::vector<double> norm_values(2 * table.size(), 4.0);
  norm_values[0] = 0.0;  // a zero weight norm: trust ratio 1
  norm_values[3] = 9.0;
  const float* norms = static_cast<const float*>(r.values(norm_values, DType::f32).data);
  r.backend().lars_apply(r.stream(), param, update, momentum, table, norms, p);
}

void run_sum_of_squares(OpRun& r) {
  const std::vector<Segment> table = segments();
  const float* x = r.in_f32(kParams, -3.0f, 3.0f);
  r.backend().sum_of_squares(r.stream(), x, table, static_cast<double*>(r.out("sum", 1, DType::f64).data), false);
  double* accumulated = static_cast<double*>(r.inout("accumulated", 1, DType::f64, 100.0f, 200.0f).data);
  r.backend().sum_of_squares(r.stream(), x, table, accumulated, true);
  // Only some segments (a bucket's share of them).
  const std::vector<Segment> some(table.begin() + 2, table.begin() + 9);
  r.backend().sum_of_squares(r.stream(), x, some, static_cast<double*>(r.out("some", 1, DType::f64).data), false);
}

void run_clip_factor(OpRun& r) {
  // Norms 5 and 0.5 against max_norm 1 (clipped and not), and clipping off (max_norm 0).
  const double* norm_sq = static_cast<const double*>(r.values({25.0, 0.25}, DType::f64).data);
  r.backend().clip_factor(r.stream(), norm_sq, 1.0f, r.out_f32("clipped", 1));
  r.backend().clip_factor(r.stream(), norm_sq + 1, 1.0f, r.out_f32("unclipped", 1));
  r.backend().clip_factor(r.stream(), norm_sq, 0.0f, r.out_f32("off", 1));
}

}  // namespace tessel::kernels::ops_test
