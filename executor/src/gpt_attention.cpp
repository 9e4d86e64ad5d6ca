// The attention core of GptStage: scores = Q K^T per head, the causal softmax, out = P V,
// and their backward, on this rank's heads (1D tensor parallel) and this rank's block of
// each sequence (ring self-attention sequence parallel, Li et al. 2021).
//
// With sp ranks, rank r holds queries, keys and values of positions [r S/sp, (r+1) S/sp)
// and the probabilities as [rows of its queries] x [every key position]. Forward: the key
// blocks travel around the ring (sp - 1 hops) and each rank fills its score columns
// block by block; after the softmax the value blocks travel the same way for out = P V.
// Backward, two passes, each moving 2 (sp - 1) blocks per rank, twice the forward's
// per ring as the planner counts: a block leaves its owner first, picks up at each rank
// the contribution to its gradient (dV, then dK) in an accumulator that travels with it,
// and the accumulator's last hop brings it home, where the owner adds its own part. The
// first pass (values) gives dP, the softmax backward dS, the second (keys) dQ and dK.
// Blocks after a rank's own are masked by causality and skipped, but still passed on.
// With sp = 1 the same code runs with one block and no messages.
#include <cmath>

#include "tessel/executor/gpt_stage.hpp"

namespace tessel::executor {

namespace {
// Tags of the ring messages: one range per pass, offset by the hop.
enum RingTag : int { kKeys = 100, kValues = 200, kBackwardValues = 300, kValueGradients = 400, kBackwardKeys = 500,
                     kKeyGradients = 600 };
}  // namespace

// Key block j of every head's [rows x (rows x sp)] matrix, to and from a packed
// [rows x rows] buffer per head.
void GptStage::extract_block(const float* whole, float* block, int j) const {
  const std::size_t rows = std::size_t(seq_), cols = rows * std::size_t(shape_.sp);
  for (std::size_t bh = 0; bh < std::size_t(sequences_) * heads_; ++bh) {
    for (std::size_t i = 0; i < rows; ++i) {
      const float* from = whole + (bh * rows + i) * cols + std::size_t(j) * rows;
      std::copy(from, from + rows, block + (bh * rows + i) * rows);
    }
  }
}

void GptStage::place_block(const float* block, float* whole, int j) const {
  const std::size_t rows = std::size_t(seq_), cols = rows * std::size_t(shape_.sp);
  for (std::size_t bh = 0; bh < std::size_t(sequences_) * heads_; ++bh) {
    for (std::size_t i = 0; i < rows; ++i) {
      const float* from = block + (bh * rows + i) * rows;
      std::copy(from, from + rows, whole + (bh * rows + i) * cols + std::size_t(j) * rows);
    }
  }
}

void GptStage::ring_shift(FloatBuffer& block, int tag) {
  const int sp = shape_.sp, r = shape_.sp_rank;
  ring_in_.resize(block.size());
  auto sent = sp_.send_async(block.data(), block.size(), (r + 1) % sp, tag);
  sp_.recv(ring_in_.data(), ring_in_.size(), (r + sp - 1) % sp, tag);
  sent->wait();
  std::swap(block, ring_in_);
}

// [rows x 3 hidden/q] (q | k | v column blocks, each this rank's heads) <-> [sequence,
// head, position, head_dim], visiting every element once.
template <typename Visit>
void GptStage::for_each_head_element(Visit visit) const {
  const int B = sequences_, S = seq_, H = heads_, D = model_.hidden / model_.heads;
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          visit(std::size_t(b * S + s), std::size_t(h * D + d), ((std::size_t(b) * H + h) * S + s) * D + d);
        }
}

void GptStage::attention_layer_forward(int mb, int l, std::string_view pass, LayerActivations& a, FloatBuffer& probs) {
  const std::size_t Cl = std::size_t(hidden_local_), n = std::size_t(sequences_) * seq_ * Cl;
  {
    auto timed = timeline_.time(id(mb, l, pass, "attn.core"));
    a.q.resize(n), a.k.resize(n), a.v.resize(n);
    for_each_head_element([&](std::size_t row, std::size_t col, std::size_t dst) {
      const float* r = a.qkv.data() + row * 3 * Cl;
      a.q[dst] = r[col], a.k[dst] = r[Cl + col], a.v[dst] = r[2 * Cl + col];
    });
  }
  attention_forward(mb, l, pass, a, probs);
  auto timed = timeline_.time(id(mb, l, pass, "attn.core"));
  a.att.resize(n);
  for_each_head_element([&](std::size_t row, std::size_t col, std::size_t src) { a.att[row * Cl + col] = a.att_heads[src]; });
}

void GptStage::attention_layer_backward(int mb, int l, const LayerActivations& a, const FloatBuffer& probs,
                                        const FloatBuffer& datt) {
  const std::size_t Cl = std::size_t(hidden_local_), n = std::size_t(sequences_) * seq_ * Cl;
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "attn.core"));
    d_heads_.resize(n);
    for_each_head_element([&](std::size_t row, std::size_t col, std::size_t dst) { d_heads_[dst] = datt[row * Cl + col]; });
  }
  attention_backward(mb, l, a, probs);
  auto timed = timeline_.time(id(mb, l, "bwd", "attn.core"));
  dqkv_.resize(3 * n);
  for_each_head_element([&](std::size_t row, std::size_t col, std::size_t src) {
    float* r = dqkv_.data() + row * 3 * Cl;
    r[col] = dq_[src], r[Cl + col] = dk_[src], r[2 * Cl + col] = dv_[src];
  });
}

void GptStage::attention_forward(int mb, int l, std::string_view pass, LayerActivations& a, FloatBuffer& probs) {
  const int S = seq_, D = model_.hidden / model_.heads, sp = shape_.sp, r = shape_.sp_rank;
  const std::size_t heads = std::size_t(sequences_) * heads_, head_block = std::size_t(S) * D;
  const std::size_t row_block = std::size_t(S) * S, row = std::size_t(S) * S * sp;  // per head: own block, whole row
  scores_.resize(heads * row);
  if (keep_keys_) a.k_all.resize(heads * head_block * sp);
  ring_block_ = a.k;
  for (int hop = 0; hop < sp; ++hop) {
    const int j = (r - hop + sp) % sp;
    if (keep_keys_) {
      for (std::size_t bh = 0; bh < heads; ++bh) {
        std::copy(ring_block_.data() + bh * head_block, ring_block_.data() + (bh + 1) * head_block,
                  a.k_all.data() + (bh * sp + j) * head_block);
      }
    }
    if (j <= r) {
      auto timed = timeline_.time(id(mb, l, pass, "attn.core"));
      block_.resize(heads * row_block);
      float* out = sp == 1 ? scores_.data() : block_.data();
      for (std::size_t bh = 0; bh < heads; ++bh) {
        k_.gemm(false, true, S, S, D, 1.0f, a.q.data() + bh * head_block, ring_block_.data() + bh * head_block, 0.0f,
                out + bh * row_block);
      }
      if (sp > 1) place_block(block_.data(), scores_.data(), j);
    }
    if (hop + 1 < sp) {
      auto timed = timeline_.time(id(mb, l, pass, "attn.ring_kv"));
      ring_shift(ring_block_, kKeys + hop);
    }
  }
  {
    auto timed = timeline_.time(id(mb, l, pass, "attn.softmax"));
    probs.resize(scores_.size());
    k_.causal_softmax_forward(scores_.data(), probs.data(), int(heads), S, S * sp, r * S, 1.0f / std::sqrt(float(D)));
  }
  a.att_heads.assign(a.q.size(), 0.0f);
  ring_block_ = a.v;
  for (int hop = 0; hop < sp; ++hop) {
    const int j = (r - hop + sp) % sp;
    if (j <= r) {
      auto timed = timeline_.time(id(mb, l, pass, "attn.core"));
      const float* p = probs.data();
      if (sp > 1) {
        block_.resize(heads * row_block);
        extract_block(probs.data(), block_.data(), j);
        p = block_.data();
      }
      for (std::size_t bh = 0; bh < heads; ++bh) {
        k_.gemm(false, false, S, D, S, 1.0f, p + bh * row_block, ring_block_.data() + bh * head_block, 1.0f,
                a.att_heads.data() + bh * head_block);
      }
    }
    if (hop + 1 < sp) {
      auto timed = timeline_.time(id(mb, l, pass, "attn.ring_kv"));
      ring_shift(ring_block_, kValues + hop);
    }
  }
}

void GptStage::attention_probabilities(int mb, int l, std::string_view pass, const LayerActivations& a,
                                       FloatBuffer& probs) {
  // Selective recompute: the keys of every block were kept in the forward (k_all with
  // sequence parallel), so no message is sent again.
  const int S = seq_, D = model_.hidden / model_.heads, sp = shape_.sp, r = shape_.sp_rank;
  const std::size_t heads = std::size_t(sequences_) * heads_, head_block = std::size_t(S) * D;
  const std::size_t row_block = std::size_t(S) * S, row = row_block * sp;
  {
    auto timed = timeline_.time(id(mb, l, pass, "attn.core"));
    scores_.resize(heads * row);
    block_.resize(heads * row_block);
    for (int j = 0; j <= r; ++j) {
      float* out = sp == 1 ? scores_.data() : block_.data();
      const float* keys = sp == 1 ? a.k.data() : a.k_all.data() + std::size_t(j) * head_block;
      const std::size_t key_stride = sp == 1 ? head_block : head_block * sp;
      for (std::size_t bh = 0; bh < heads; ++bh) {
        k_.gemm(false, true, S, S, D, 1.0f, a.q.data() + bh * head_block, keys + bh * key_stride, 0.0f,
                out + bh * row_block);
      }
      if (sp > 1) place_block(block_.data(), scores_.data(), j);
    }
  }
  auto timed = timeline_.time(id(mb, l, pass, "attn.softmax"));
  probs.resize(scores_.size());
  k_.causal_softmax_forward(scores_.data(), probs.data(), int(heads), S, S * sp, r * S, 1.0f / std::sqrt(float(D)));
}

void GptStage::attention_backward(int mb, int l, const LayerActivations& a, const FloatBuffer& probs) {
  const int S = seq_, D = model_.hidden / model_.heads, sp = shape_.sp, r = shape_.sp_rank;
  const std::size_t heads = std::size_t(sequences_) * heads_, head_block = std::size_t(S) * D;
  const std::size_t row_block = std::size_t(S) * S;
  const std::size_t n = heads * head_block;
  const int next = (r + 1) % sp, previous = (r + sp - 1) % sp;
  // Per pass: owned = this rank's block (V, then K), gives the matrix product for block
  // j into dP (first pass) or uses dS (second pass); accumulates into `gradient` (dV,
  // then dK) with the block's accumulator, and into dQ in the second pass.
  auto ring_pass = [&](const FloatBuffer& owned, int block_tag, int gradient_tag, bool values, FloatBuffer& gradient) {
    std::vector<std::unique_ptr<CommRequest>> sends;
    std::vector<FloatBuffer> in_flight(std::size_t(2 * sp));  // kept alive until every send is done
    auto post = [&](const FloatBuffer& buffer, int tag) {
      auto timed = timeline_.time(id(mb, l, "bwd", "attn.ring_kv"));
      sends.push_back(sp_.send_async(buffer.data(), buffer.size(), next, tag));
    };
    auto receive = [&](FloatBuffer& buffer, int tag) {
      auto timed = timeline_.time(id(mb, l, "bwd", "attn.ring_kv"));
      buffer.resize(n);
      sp_.recv(buffer.data(), n, previous, tag);
    };
    // block j's contribution: dP columns (values) or dQ (keys), and its gradient part.
    auto compute = [&](int j, const float* block, float* accumulator) {
      if (j > r) return;  // masked by causality
      auto timed = timeline_.time(id(mb, l, "bwd", "attn.core"));
      const float* p = values ? probs.data() : dscores_.data();
      if (sp > 1) {
        block_.resize(heads * row_block);
        extract_block(p, block_.data(), j);
        p = block_.data();
      }
      scratch_block_.resize(heads * row_block);
      for (std::size_t bh = 0; bh < heads; ++bh) {
        const float* matrix = p + bh * row_block;  // P or dS, the [S x S] block of key block j
        if (values) {
          float* dp = sp == 1 ? dprobs_.data() + bh * row_block : scratch_block_.data() + bh * row_block;
          k_.gemm(false, true, S, S, D, 1.0f, d_heads_.data() + bh * head_block, block + bh * head_block, 0.0f, dp);
          k_.gemm(true, false, S, D, S, 1.0f, matrix, d_heads_.data() + bh * head_block, 1.0f,
                  accumulator + bh * head_block);
        } else {
          k_.gemm(false, false, S, D, S, 1.0f, matrix, block + bh * head_block, 1.0f, dq_.data() + bh * head_block);
          k_.gemm(true, false, S, D, S, 1.0f, matrix, a.q.data() + bh * head_block, 1.0f,
                  accumulator + bh * head_block);
        }
      }
      if (values && sp > 1) place_block(scratch_block_.data(), dprobs_.data(), j);
    };
    if (sp > 1) post(owned, block_tag + 1);
    for (int hop = 1; hop < sp; ++hop) {
      const int j = (r - hop + sp) % sp;
      FloatBuffer& block = in_flight[std::size_t(2 * hop)];
      FloatBuffer& accumulator = in_flight[std::size_t(2 * hop + 1)];
      receive(block, block_tag + hop);
      if (hop >= 2) receive(accumulator, gradient_tag + hop);
      else accumulator.assign(n, 0.0f);
      compute(j, block.data(), accumulator.data());
      if (hop + 1 < sp) post(block, block_tag + hop + 1);
      post(accumulator, gradient_tag + hop + 1);
    }
    gradient.assign(n, 0.0f);
    if (sp > 1) receive(gradient, gradient_tag + sp);  // this rank's block, home from its tour
    compute(r, owned.data(), gradient.data());
    for (auto& send : sends) send->wait();
  };
  dprobs_.assign(probs.size(), 0.0f);
  ring_pass(a.v, kBackwardValues, kValueGradients, true, dv_);
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "attn.softmax"));
    dscores_.resize(probs.size());
    k_.causal_softmax_backward(probs.data(), dprobs_.data(), dscores_.data(), std::int64_t(heads) * S, S * sp,
                               1.0f / std::sqrt(float(D)));
  }
  dq_.assign(n, 0.0f);
  ring_pass(a.k, kBackwardKeys, kKeyGradients, false, dk_);
}

}  // namespace tessel::executor
