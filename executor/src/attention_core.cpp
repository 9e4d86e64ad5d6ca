#include "tessel/executor/attention_core.hpp"

#include <cmath>
#include <vector>

namespace tessel::executor {

namespace {
// Tags of the ring messages: one range per pass, offset by the hop.
enum RingTag : int {
  kKeys = 100,
  kValues = 200,
  kBackwardValues = 300,
  kValueGradients = 400,
  kBackwardKeys = 500,
  kKeyGradients = 600
};
// The backward ring's messages: blocks and accumulators posted to the next rank without
// waiting and received from the previous one, each timed under attn.ring_kv.
class RingMail {
 public:
  RingMail(OpTimeline& timeline, Communicator& ring, const IdScope& ids, DType type, int rank, int size)
      : timeline_(timeline),
        ring_(ring),
        id_(ids(ops::attn_ring_kv)),
        type_(type),
        next_((rank + 1) % size),
        previous_((rank + size - 1) % size) {}
  ~RingMail() { wait_all(); }
  // `buffer` must stay alive until wait_all().
  void post(const Buffer& buffer, int tag) {
    auto timed = timeline_.time(id_, ring_.stream());
    sends_.push_back(ring_.send_async(buffer.data(), buffer.size(), type_, next_, tag));
  }
  void receive(Buffer& buffer, std::size_t count, int tag) {
    auto timed = timeline_.time(id_, ring_.stream());
    buffer.resize(count);
    ring_.recv(buffer.data(), count, type_, previous_, tag);
  }
  void wait_all() {
    for (auto& send : sends_) send->wait();
    sends_.clear();
  }

 private:
  OpTimeline& timeline_;
  Communicator& ring_;
  std::string id_;
  DType type_;
  int next_, previous_;
  std::vector<std::unique_ptr<CommRequest>> sends_;
};
}  // namespace

void LayerActivations::bind(kernels::Backend& backend, DType compute, MemoryCategory category) {
  for (auto member : kSaved) (this->*member).bind(backend, compute, category);
  for (Buffer* b : {&qkv, &att_heads}) b->bind(backend, compute, MemoryCategory::workspace);
  for (auto member : kRowStatistics) (this->*member).bind(backend, DType::f32, category);
}

AttentionCore::AttentionCore(const TensorLayout& layout, AttentionForm form, Communicator& ring, bool keep_all_keys)
    : backend_(layout.context().backend),
      timeline_(layout.context().timeline),
      ring_(ring),
      form_(form),
      compute_(layout.context().compute),
      sequences_(layout.attention_sequences()),
      seq_(layout.context().seq),
      heads_(layout.heads_local()),
      head_dim_(layout.context().model.head_dim()),
      hidden_local_(layout.hidden_local()),
      sp_(layout.context().shape.sp),
      sp_rank_(layout.context().shape.sp_rank),
      kv_heads_(layout.kv_heads_local()),
      kv_local_(layout.kv_local()),
      qkv_ld_(layout.qkv_local()),
      keep_keys_(keep_all_keys && layout.context().shape.sp > 1 && form == AttentionForm::materialized),
      rope_(layout.context().model.position_embedding == PositionEmbedding::rope),
      rope_theta_(float(layout.context().model.rope_theta)) {
  for (Buffer* b : {&scores_, &block_, &scratch_block_, &ring_block_, &ring_values_, &ring_in_, &d_heads_, &out_heads_,
                    &dq_, &dk_, &dv_, &dprobs_, &dscores_, &shared_keys_, &shared_values_, &shared_gradient_,
                    &shared_value_gradient_, &kv_sum_part_}) {
    b->bind(backend_, compute_);
  }
  delta_.bind(backend_, DType::f32);
}

std::vector<Buffer>& AttentionCore::in_flight_buffers(int count) {
  while (int(in_flight_.size()) < count) in_flight_.emplace_back(backend_, compute_);
  return in_flight_;
}

kernels::BatchedGemm AttentionCore::per_head(bool transpose_a, bool transpose_b, int m, int n, int k, CRef a,
                                             std::int64_t stride_a, CRef b, std::int64_t stride_b, float beta, Ref c,
                                             std::int64_t stride_c) const {
  kernels::BatchedGemm g;
  g.gemm.transpose_a = transpose_a, g.gemm.transpose_b = transpose_b;
  g.gemm.m = m, g.gemm.n = n, g.gemm.k = k;
  g.gemm.a = a, g.gemm.b = b, g.gemm.c = c;
  g.gemm.beta = beta;
  g.batch = sequences_ * heads_;
  g.stride_a = stride_a, g.stride_b = stride_b, g.stride_c = stride_c;
  return g;
}

void AttentionCore::extract_block(const Buffer& whole, Buffer& block, int j) {
  const std::int64_t S = seq_;
  block.resize(std::size_t(sequences_ * heads_) * std::size_t(S * S));
  backend_.copy_2d(Stream::compute, block.ref(), S, whole.at(j * S), S * sp_, sequences_ * heads_ * seq_, seq_);
}

void AttentionCore::place_block(const Buffer& block, Buffer& whole, int j) {
  const std::int64_t S = seq_;
  backend_.copy_2d(Stream::compute, whole.at(j * S), S * sp_, block.cref(), S, sequences_ * heads_ * seq_, seq_);
}

void AttentionCore::ring_shift(const IdScope& ids, Buffer& block, int tag) {
  auto timed = timeline_.time(ids(ops::attn_ring_kv), ring_.stream());
  ring_in_.resize(block.size());
  auto sent = ring_.send_async(block.data(), block.size(), compute_, (sp_rank_ + 1) % sp_, tag);
  ring_.recv(ring_in_.data(), ring_in_.size(), compute_, (sp_rank_ + sp_ - 1) % sp_, tag);
  sent->wait();
  swap(block, ring_in_);
}

void AttentionCore::forward(const IdScope& ids, LayerActivations& a, Buffer& probs) {
  const std::int64_t n = std::int64_t(sequences_) * seq_ * hidden_local_;
  {
    auto timed = timeline_.time(ids(ops::attn_core));
    a.q.resize(std::size_t(n));
    backend_.rows_to_heads(Stream::compute, a.qkv.cref(), qkv_ld_, a.q.ref(), sequences_, seq_, heads_, head_dim_);
    if (rope_) {
      backend_.rope_forward(Stream::compute, a.q.cref(), a.q.ref(), sequences_ * heads_, seq_, head_dim_,
                            sp_rank_ * seq_, rope_theta_);
    }
    split_kv(a.qkv, hidden_local_, rope_, a.k);
    split_kv(a.qkv, hidden_local_ + kv_local_, false, a.v);
  }
  if (form_ == AttentionForm::fused) fused_forward(ids, a);
  else materialized_forward(ids, a, probs);
  auto timed = timeline_.time(ids(ops::attn_core));
  a.att.resize(std::size_t(n));
  backend_.heads_to_rows(Stream::compute, a.att_heads.cref(), a.att.ref(), hidden_local_, sequences_, seq_, heads_, head_dim_);
}

void AttentionCore::materialized_forward(const IdScope& ids, LayerActivations& a, Buffer& probs) {
  const int S = seq_, D = head_dim_, sp = sp_, r = sp_rank_;
  const std::size_t heads = std::size_t(sequences_) * heads_, head_block = std::size_t(S) * D;
  const std::size_t row_block = std::size_t(S) * S, row = row_block * sp;  // per head: own block, whole row
  const std::size_t kv_heads = std::size_t(sequences_) * kv_heads_;
  scores_.resize(heads * row);
  if (keep_keys_) a.k_all.resize(kv_heads * head_block * sp);
  ring_block_.copy_from(a.k);
  for (int hop = 0; hop < sp; ++hop) {
    const int j = (r - hop + sp) % sp;
    if (keep_keys_) {
      backend_.copy_2d(Stream::compute, a.k_all.at(std::int64_t(j) * head_block), std::int64_t(head_block * sp),
                 ring_block_.cref(), std::int64_t(head_block), int(kv_heads), int(head_block));
    }
    if (j <= r) {
      auto timed = timeline_.time(ids(ops::attn_core));
      // Without a ring the scores are written in place: no block buffer is held.
      if (sp > 1) block_.resize(heads * row_block);
      Buffer& out = sp == 1 ? scores_ : block_;
      const Buffer& keys = shared(ring_block_, shared_keys_);
      backend_.gemm_batched(Stream::compute, per_head(false, true, S, S, D, a.q.cref(), head_block, keys.cref(),
                                                head_block, 0.0f, out.ref(), row_block));
      if (sp > 1) place_block(block_, scores_, j);
    }
    if (hop + 1 < sp) ring_shift(ids, ring_block_, kKeys + hop);
  }
  {
    auto timed = timeline_.time(ids(ops::attn_softmax));
    probs.resize(scores_.size());
    backend_.causal_softmax_forward(Stream::compute, scores_.cref(), probs.ref(), int(heads), S, S * sp, r * S,
                              1.0f / std::sqrt(float(D)));
  }
  a.att_heads.assign(a.q.size(), 0.0f);
  ring_block_.copy_from(a.v);
  for (int hop = 0; hop < sp; ++hop) {
    const int j = (r - hop + sp) % sp;
    if (j <= r) {
      auto timed = timeline_.time(ids(ops::attn_core));
      const Buffer* p = &probs;
      if (sp > 1) {
        extract_block(probs, block_, j);
        p = &block_;
      }
      const Buffer& values = shared(ring_block_, shared_values_);
      backend_.gemm_batched(Stream::compute, per_head(false, false, S, D, S, p->cref(), row_block, values.cref(),
                                                head_block, 1.0f, a.att_heads.ref(), head_block));
    }
    if (hop + 1 < sp) ring_shift(ids, ring_block_, kValues + hop);
  }
}

void AttentionCore::fused_forward(const IdScope& ids, LayerActivations& a) {
  const int S = seq_, sp = sp_, r = sp_rank_;
  const int heads = sequences_ * heads_;
  a.att_heads.resize(a.q.size());
  a.lse.resize(std::size_t(heads) * S);
  ring_block_.copy_from(a.k);
  ring_values_.copy_from(a.v);
  bool merge = false;
  for (int hop = 0; hop < sp; ++hop) {
    const int j = (r - hop + sp) % sp;
    if (j <= r) {
      auto timed = timeline_.time(ids(ops::attn_core));
      kernels::Attention at;
      at.bh = heads, at.q_len = S, at.kv_len = S, at.head_dim = head_dim_;
      at.q_first = r * S, at.kv_first = j * S;
      at.scale = 1.0f / std::sqrt(float(head_dim_));
      at.q = a.q.cref(), at.k = shared(ring_block_, shared_keys_).cref();
      at.v = shared(ring_values_, shared_values_).cref();
      at.out = a.att_heads.ref();
      at.lse = a.lse.f32();
      at.merge = merge;
      backend_.attention_forward(Stream::compute, at);
      merge = true;
    }
    if (hop + 1 < sp) {
      ring_shift(ids, ring_block_, kKeys + hop);
      ring_shift(ids, ring_values_, kValues + hop);
    }
  }
}

void AttentionCore::probabilities(const IdScope& ids, const LayerActivations& a, Buffer& probs) {
  // Selective recompute: the keys of every block were kept in the forward (k_all with
  // sequence parallel), so no message is sent again.
  const int S = seq_, D = head_dim_, sp = sp_, r = sp_rank_;
  const std::size_t heads = std::size_t(sequences_) * heads_, head_block = std::size_t(S) * D;
  const std::size_t row_block = std::size_t(S) * S, row = row_block * sp;
  {
    auto timed = timeline_.time(ids(ops::attn_core));
    scores_.resize(heads * row);
    if (sp > 1) block_.resize(heads * row_block);
    const bool grouped = heads_ != kv_heads_;
    for (int j = 0; j <= r; ++j) {
      Buffer& out = sp == 1 ? scores_ : block_;
      CRef keys = sp == 1 ? a.k.cref() : a.k_all.at(std::int64_t(j) * head_block);
      std::int64_t key_stride = sp == 1 ? head_block : head_block * sp;
      if (grouped) {
        // Key block j of each kv head, then one copy per sharing query head.
        ring_in_.resize(kv_size());
        backend_.copy_2d(Stream::compute, ring_in_.ref(), std::int64_t(head_block), keys, key_stride,
                         sequences_ * kv_heads_, int(head_block));
        keys = shared(ring_in_, shared_keys_).cref();
        key_stride = std::int64_t(head_block);
      }
      backend_.gemm_batched(Stream::compute, per_head(false, true, S, S, D, a.q.cref(), head_block, keys, key_stride, 0.0f,
                                                out.ref(), row_block));
      if (sp > 1) place_block(block_, scores_, j);
    }
  }
  auto timed = timeline_.time(ids(ops::attn_softmax));
  probs.resize(scores_.size());
  backend_.causal_softmax_forward(Stream::compute, scores_.cref(), probs.ref(), int(heads), S, S * sp, r * S,
                            1.0f / std::sqrt(float(D)));
}

void AttentionCore::backward(const IdScope& ids, const LayerActivations& a, const Buffer& probs, const Buffer& datt,
                             Buffer& dqkv) {
  const std::int64_t n = std::int64_t(sequences_) * seq_ * hidden_local_;
  {
    auto timed = timeline_.time(ids(ops::attn_core));
    d_heads_.resize(std::size_t(n));
    backend_.rows_to_heads(Stream::compute, datt.cref(), hidden_local_, d_heads_.ref(), sequences_, seq_, heads_, head_dim_);
  }
  if (form_ == AttentionForm::fused) fused_backward(ids, a);
  else materialized_backward(ids, a, probs);
  auto timed = timeline_.time(ids(ops::attn_core));
  if (!dqkv.bound()) dqkv.bind(backend_, compute_);
  dqkv.resize(std::size_t(sequences_) * seq_ * qkv_ld_);
  if (rope_) {
    backend_.rope_backward(Stream::compute, dq_.cref(), dq_.ref(), sequences_ * heads_, seq_, head_dim_,
                           sp_rank_ * seq_, rope_theta_);
  }
  backend_.heads_to_rows(Stream::compute, dq_.cref(), dqkv.ref(), qkv_ld_, sequences_, seq_, heads_, head_dim_);
  merge_kv(dk_, rope_, dqkv, hidden_local_);
  merge_kv(dv_, false, dqkv, hidden_local_ + kv_local_);
}

void AttentionCore::split_kv(const Buffer& qkv, std::int64_t offset, bool turn, Buffer& kv) {
  kv.resize(kv_size());
  backend_.rows_to_heads(Stream::compute, qkv.at(offset), qkv_ld_, kv.ref(), sequences_, seq_, kv_heads_, head_dim_);
  if (turn) {
    backend_.rope_forward(Stream::compute, kv.cref(), kv.ref(), sequences_ * kv_heads_, seq_, head_dim_,
                          sp_rank_ * seq_, rope_theta_);
  }
}

void AttentionCore::merge_kv(Buffer& kv, bool turn, Buffer& dqkv, std::int64_t offset) {
  if (turn) {
    backend_.rope_backward(Stream::compute, kv.cref(), kv.ref(), sequences_ * kv_heads_, seq_, head_dim_,
                           sp_rank_ * seq_, rope_theta_);
  }
  backend_.heads_to_rows(Stream::compute, kv.cref(), dqkv.at(offset), qkv_ld_, sequences_, seq_, kv_heads_, head_dim_);
}

const Buffer& AttentionCore::shared(const Buffer& kv, Buffer& heads) {
  const int group = heads_ / kv_heads_;
  if (group == 1) return kv;
  const std::int64_t block = std::int64_t(seq_) * head_dim_;
  heads.resize(std::size_t(sequences_) * heads_ * std::size_t(block));
  // Head h reads kv head h / group: copy j of every kv head goes to heads g group + j.
  for (int j = 0; j < group; ++j) {
    backend_.copy_2d(Stream::compute, heads.at(j * block), group * block, kv.cref(), block, sequences_ * kv_heads_,
                     int(block));
  }
  return heads;
}

void AttentionCore::add_shared_gradient(const Buffer& heads, Buffer& kv) {
  const std::int64_t block = std::int64_t(seq_) * head_dim_;
  const int group = heads_ / kv_heads_, rows = sequences_ * kv_heads_;
  kv_sum_part_.resize(kv.size());
  for (int j = 0; j < group; ++j) {
    backend_.copy_2d(Stream::compute, kv_sum_part_.ref(), block, heads.at(j * block), group * block, rows, int(block));
    backend_.add(Stream::compute, kv.ref(), kv.cref(), kv_sum_part_.cref(), std::int64_t(kv.size()));
  }
}

void AttentionCore::materialized_backward(const IdScope& ids, const LayerActivations& a, const Buffer& probs) {
  const int S = seq_, D = head_dim_, sp = sp_, r = sp_rank_;
  const std::size_t heads = std::size_t(sequences_) * heads_, head_block = std::size_t(S) * D;
  const std::size_t row_block = std::size_t(S) * S, n = kv_size(), nq = heads * head_block;
  const bool grouped = heads_ != kv_heads_;
  // Per pass: owned = this rank's block (V, then K), gives the matrix product for block
  // j into dP (first pass) or uses dS (second pass); accumulates into `gradient` (dV,
  // then dK) with the block's accumulator, and into dQ in the second pass. With
  // grouped-query attention the blocks and accumulators travel on the kv heads: a block
  // is shared out to the query heads here and their gradient parts summed back into it.
  auto ring_pass = [&](const Buffer& owned, int block_tag, int gradient_tag, bool values, Buffer& gradient) {
    std::vector<Buffer>& in_flight = in_flight_buffers(2 * sp);
    RingMail mail(timeline_, ring_, ids, compute_, r, sp);
    // block j's contribution: dP columns (values) or dQ (keys), and its gradient part.
    auto compute = [&](int j, const Buffer& kv_block, Buffer& accumulator) {
      if (j > r) return;  // masked by causality
      auto timed = timeline_.time(ids(ops::attn_core));
      const Buffer* matrix = values ? &probs : &dscores_;  // P or dS
      if (sp > 1) {
        extract_block(*matrix, block_, j);
        matrix = &block_;
      }
      const Buffer& block = shared(kv_block, values ? shared_values_ : shared_keys_);
      Buffer& part = grouped ? shared_gradient_ : accumulator;  // this block's gradient, per query head
      const float part_beta = grouped ? 0.0f : 1.0f;
      if (grouped) part.resize(nq);
      if (values) {
        if (sp > 1) scratch_block_.resize(heads * row_block);
        Buffer& dp = sp == 1 ? dprobs_ : scratch_block_;
        backend_.gemm_batched(Stream::compute, per_head(false, true, S, S, D, d_heads_.cref(), head_block, block.cref(),
                                                  head_block, 0.0f, dp.ref(), row_block));
        backend_.gemm_batched(Stream::compute, per_head(true, false, S, D, S, matrix->cref(), row_block, d_heads_.cref(),
                                                  head_block, part_beta, part.ref(), head_block));
        if (sp > 1) place_block(scratch_block_, dprobs_, j);
      } else {
        backend_.gemm_batched(Stream::compute, per_head(false, false, S, D, S, matrix->cref(), row_block, block.cref(),
                                                  head_block, 1.0f, dq_.ref(), head_block));
        backend_.gemm_batched(Stream::compute, per_head(true, false, S, D, S, matrix->cref(), row_block, a.q.cref(),
                                                  head_block, part_beta, part.ref(), head_block));
      }
      if (grouped) add_shared_gradient(part, accumulator);
    };
    if (sp > 1) mail.post(owned, block_tag + 1);
    for (int hop = 1; hop < sp; ++hop) {
      const int j = (r - hop + sp) % sp;
      Buffer& block = in_flight[std::size_t(2 * hop)];
      Buffer& accumulator = in_flight[std::size_t(2 * hop + 1)];
      mail.receive(block, n, block_tag + hop);
      if (hop >= 2) mail.receive(accumulator, n, gradient_tag + hop);
      else accumulator.assign(n, 0.0f);
      compute(j, block, accumulator);
      if (hop + 1 < sp) mail.post(block, block_tag + hop + 1);
      mail.post(accumulator, gradient_tag + hop + 1);
    }
    gradient.assign(n, 0.0f);
    if (sp > 1) mail.receive(gradient, n, gradient_tag + sp);  // this rank's block, home from its tour
    compute(r, owned, gradient);
    mail.wait_all();
  };
  dprobs_.assign(probs.size(), 0.0f);
  ring_pass(a.v, kBackwardValues, kValueGradients, true, dv_);
  {
    auto timed = timeline_.time(ids(ops::attn_softmax));
    dscores_.resize(probs.size());
    backend_.causal_softmax_backward(Stream::compute, probs.cref(), dprobs_.cref(), dscores_.ref(), std::int64_t(heads) * S,
                               S * sp, 1.0f / std::sqrt(float(D)));
  }
  dq_.assign(nq, 0.0f);
  ring_pass(a.k, kBackwardKeys, kKeyGradients, false, dk_);
}

void AttentionCore::fused_backward(const IdScope& ids, const LayerActivations& a) {
  const int S = seq_, D = head_dim_, sp = sp_, r = sp_rank_;
  const int heads = sequences_ * heads_;
  const std::size_t nq = std::size_t(heads) * std::size_t(S) * D, n = kv_size();
  const bool grouped = heads_ != kv_heads_;
  {
    // delta = rowsum(dO * O) over the final output, in the heads' layout.
    auto timed = timeline_.time(ids(ops::attn_core));
    out_heads_.resize(nq);
    backend_.rows_to_heads(Stream::compute, a.att.cref(), hidden_local_, out_heads_.ref(), sequences_, seq_, heads_, D);
    delta_.resize(std::size_t(heads) * S);
    backend_.attention_delta(Stream::compute, d_heads_.cref(), out_heads_.cref(), delta_.f32(), std::int64_t(heads) * S, D);
  }
  dq_.assign(nq, 0.0f);
  std::vector<Buffer>& in_flight = in_flight_buffers(4 * sp);  // [hop][key, value, dK, dV], on the kv heads
  RingMail mail(timeline_, ring_, ids, compute_, r, sp);
  auto compute = [&](int j, const Buffer& keys, const Buffer& values, Buffer& dk, Buffer& dv) {
    if (j > r) return;  // masked by causality
    auto timed = timeline_.time(ids(ops::attn_core));
    kernels::AttentionGrad g;
    g.bh = heads, g.q_len = S, g.kv_len = S, g.head_dim = D;
    g.q_first = r * S, g.kv_first = j * S;
    g.scale = 1.0f / std::sqrt(float(D));
    g.q = a.q.cref(), g.k = shared(keys, shared_keys_).cref(), g.v = shared(values, shared_values_).cref();
    g.dout = d_heads_.cref();
    g.out = out_heads_.cref();  // the final out delta came from: cuDNN's backward wants it
    g.lse = a.lse.f32(), g.delta = delta_.f32();
    g.dq = dq_.ref(), g.dk = dk.ref(), g.dv = dv.ref();
    if (grouped) {  // per query head, then summed into the kv heads' accumulators
      shared_gradient_.resize(nq);
      shared_value_gradient_.resize(nq);
      g.dk = shared_gradient_.ref(), g.dv = shared_value_gradient_.ref();
    }
    g.accumulate_kv = !grouped;
    backend_.attention_backward(Stream::compute, g);
    if (grouped) {
      add_shared_gradient(shared_gradient_, dk);
      add_shared_gradient(shared_value_gradient_, dv);
    }
  };
  if (sp > 1) {
    mail.post(a.k, kBackwardKeys + 1);
    mail.post(a.v, kBackwardValues + 1);
  }
  for (int hop = 1; hop < sp; ++hop) {
    const int j = (r - hop + sp) % sp;
    Buffer* slot = &in_flight[std::size_t(4 * hop)];
    Buffer &keys = slot[0], &values = slot[1], &dk = slot[2], &dv = slot[3];
    mail.receive(keys, n, kBackwardKeys + hop);
    mail.receive(values, n, kBackwardValues + hop);
    if (hop >= 2) {
      mail.receive(dk, n, kKeyGradients + hop);
      mail.receive(dv, n, kValueGradients + hop);
    } else {
      dk.assign(n, 0.0f);
      dv.assign(n, 0.0f);
    }
    compute(j, keys, values, dk, dv);
    if (hop + 1 < sp) {
      mail.post(keys, kBackwardKeys + hop + 1);
      mail.post(values, kBackwardValues + hop + 1);
    }
    mail.post(dk, kKeyGradients + hop + 1);
    mail.post(dv, kValueGradients + hop + 1);
  }
  dk_.assign(n, 0.0f);
  dv_.assign(n, 0.0f);
  if (sp > 1) {  // this rank's blocks' gradients, home from their tour
    mail.receive(dk_, n, kKeyGradients + sp);
    mail.receive(dv_, n, kValueGradients + sp);
  }
  compute(r, a.k, a.v, dk_, dv_);
  mail.wait_all();
}

}  // namespace tessel::executor
