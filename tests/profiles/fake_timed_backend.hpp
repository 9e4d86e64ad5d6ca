// A Backend test double for the GPU profiler: fake device pointers nothing dereferences,
// real host memory for the random inputs, and a virtual clock each timed op advances by a
// fixed cost (GEMMs at kFlopsPerS, copies at kCopyBytesPerS, ...). So every stored
// measurement is known exactly and a test can check each sample timed the op it names.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "tessel/kernels/backend.hpp"

namespace tessel::testing {

using namespace tessel::kernels;

class FakeTimedBackend final : public Backend {
 public:
  static constexpr double kFlopsPerS = 1e12;
  static constexpr double kCopyBytesPerS = 1e10;
  static constexpr double kStreamBytesPerS = 1e11;
  static constexpr double kAttentionForwardS = 1e-3, kAttentionBackwardS = 3e-3, kDeltaS = 1e-4;

  std::map<std::string, int> calls;  // op name -> how many times it ran
  std::size_t live_host_blocks = 0, live_device_blocks = 0;

  std::string_view name() const override { return "fake"; }
  bool host_memory() const override { return false; }
  DType default_compute_type(bool) const override { return DType::bf16; }

  void* allocate(std::size_t) override {
    ++live_device_blocks;
    next_address_ += 1 << 20;
    return reinterpret_cast<void*>(next_address_);
  }
  void deallocate(void*) override { --live_device_blocks; }
  void* allocate_host(std::size_t bytes) override {
    ++live_host_blocks;
    return std::malloc(bytes == 0 ? 1 : bytes);
  }
  void deallocate_host(void* pointer) override {
    --live_host_blocks;
    std::free(pointer);
  }
  void upload(Stream, void*, const void*, std::size_t bytes) override { run("upload", double(bytes) / kCopyBytesPerS); }
  void download(Stream, void*, const void*, std::size_t bytes) override {
    run("download", double(bytes) / kCopyBytesPerS);
  }
  void copy(Stream, void*, const void*, std::size_t bytes) override {
    run("copy", 2.0 * double(bytes) / kStreamBytesPerS);
  }

  void synchronize(Stream) override { ++calls["synchronize"]; }
  void synchronize() override { ++calls["synchronize"]; }
  void reset_origin() override { clock_s_ = 0; }
  TimeMark mark(Stream) override {
    marks_.push_back(clock_s_);
    return TimeMark(marks_.size() - 1);
  }
  double elapsed_s(TimeMark mark) override { return marks_.at(mark); }
  void release_marks() override { marks_.clear(); }

  void fill(Stream, Ref, std::int64_t, float) override { ++calls["fill"]; }
  void convert(Stream, Ref, CRef, std::int64_t) override { ++calls["convert"]; }
  void add(Stream, Ref, CRef, CRef, std::int64_t n) override { run("add", 12.0 * double(n) / kStreamBytesPerS); }
  void gemm(Stream, const Gemm& g) override { run("gemm", 2.0 * g.m * double(g.n) * g.k / kFlopsPerS); }
  void layer_norm_forward(Stream, CRef, CRef, CRef, Ref, float*, float*, int rows, int cols, float) override {
    run("layer_norm_forward", 12.0 * rows * double(cols) / kStreamBytesPerS);
  }
  void gelu_forward(Stream, CRef, Ref, std::int64_t n) override { run("gelu_forward", 8.0 * double(n) / kStreamBytesPerS); }
  void causal_softmax_forward(Stream, CRef, Ref, int batch, int rows, int cols, int, float) override {
    run("causal_softmax_forward", 12.0 * batch * rows * double(cols) / kStreamBytesPerS);
  }
  void attention_forward(Stream, const Attention&) override { run("attention_forward", kAttentionForwardS); }
  void attention_delta(Stream, CRef, CRef, float*, std::int64_t, int) override { run("attention_delta", kDeltaS); }
  void attention_backward(Stream, const AttentionGrad&) override { run("attention_backward", kAttentionBackwardS); }
  void adamw_step(Stream, float*, const float*, float*, float*, std::int64_t n, const AdamWParams&, const float*) override {
    run("adamw_step", 28.0 * double(n) / kStreamBytesPerS);
  }

  // Everything the profiler does not time: no-ops.
  void wait_for(Stream, Stream) override {}
  void copy_2d(Stream, Ref, std::int64_t, CRef, std::int64_t, int, int, int, std::int64_t, std::int64_t) override {}
  void transpose(Stream, Ref, CRef, int, int) override {}
  void scale(Stream, Ref, std::int64_t, float) override {}
  void residual(Stream, Ref, CRef, CRef, CRef, int, int) override {}
  void residual_layer_norm_forward(Stream, Ref, CRef, CRef, CRef, CRef, CRef, Ref, float*, float*, int, int,
                                   float) override {}
  void residual_rms_norm_forward(Stream, Ref, CRef, CRef, CRef, CRef, Ref, float*, int, int, float) override {}
  void add_bias(Stream, Ref, CRef, int, int) override {}
  void bias_gradient(Stream, CRef, float*, int, int) override {}
  void add_rows(Stream, Ref, CRef, int, int, RowMap) override {}
  void add_rows_backward(Stream, CRef, float*, int, int, RowMap) override {}
  void gather_sum_rows(Stream, Ref, CRef, int, const std::int32_t*, const float*, int, int, int, bool) override {}
  void rows_to_heads(Stream, CRef, std::int64_t, Ref, int, int, int, int) override {}
  void heads_to_rows(Stream, CRef, Ref, std::int64_t, int, int, int, int) override {}
  void gemm_batched(Stream, const BatchedGemm&) override {}
  void layer_norm_backward(Stream, CRef, CRef, CRef, const float*, const float*, Ref, float*, float*, int, int, bool) override {}
  void rms_norm_forward(Stream, CRef, CRef, Ref, float*, int, int, float) override {}
  void rms_norm_backward(Stream, CRef, CRef, CRef, const float*, Ref, float*, int, int, bool) override {}
  void row_sums(Stream, CRef, float*, int, int) override {}
  void row_centered_square_sums(Stream, CRef, const float*, float*, int, int) override {}
  void finish_mean(Stream, float*, int, int) override {}
  void finish_rstd(Stream, float*, int, int, float) override {}
  void layer_norm_apply(Stream, CRef, CRef, CRef, const float*, const float*, Ref, int, int) override {}
  void layer_norm_backward_partials(Stream, CRef, CRef, CRef, const float*, const float*, float*, float*, float*, float*, int, int) override {}
  void layer_norm_backward_apply(Stream, CRef, CRef, CRef, const float*, const float*, const float*, const float*, int, Ref, int, int, bool) override {}
  void gelu_backward(Stream, CRef, CRef, Ref, std::int64_t) override {}
  void swiglu_forward(Stream, CRef, Ref, int, int) override {}
  void swiglu_backward(Stream, CRef, CRef, Ref, int, int) override {}
  void rope_forward(Stream, CRef, Ref, int, int, int, int, float) override {}
  void rope_backward(Stream, CRef, Ref, int, int, int, int, float) override {}
  void causal_softmax_backward(Stream, CRef, CRef, Ref, std::int64_t, int, float) override {}
  void cross_entropy_max(Stream, CRef, float*, int, int, int) override {}
  void cross_entropy_sums(Stream, CRef, const std::int32_t*, const float*, float*, float*, int, int, int, int) override {}
  void cross_entropy_loss(Stream, const float*, const float*, const float*, int, double*) override {}
  void cross_entropy_backward(Stream, CRef, const std::int32_t*, const float*, const float*, Ref, int, int, int, int, float) override {}
  void cross_entropy_fused(Stream, CRef, const std::int32_t*, Ref, int, int, int, float, double*) override {}
  void embedding_forward(Stream, const std::int32_t*, CRef, Ref, int, int, int, int) override {}
  void embedding_backward(Stream, const std::int32_t*, CRef, float*, int, int, int, int) override {}
  void lamb_update(Stream, const float*, const float*, float*, float*, float*, std::int64_t, const LambParams&, const float*) override {}
  void lars_update(Stream, const float*, const float*, float*, std::int64_t, const LarsParams&, const float*) override {}
  void segment_norms(Stream, const float*, const float*, std::span<const Segment>, float*) override {}
  void lamb_apply(Stream, float*, const float*, std::span<const Segment>, const float*, float) override {}
  void lars_apply(Stream, float*, const float*, float*, std::span<const Segment>, const float*, const LarsParams&) override {}
  void sum_of_squares(Stream, const float*, std::span<const Segment>, double*, bool) override {}
  void clip_factor(Stream, const double*, float, float*) override {}

 private:
  void run(const char* op, double seconds) {
    ++calls[op];
    clock_s_ += seconds;
  }
  std::uintptr_t next_address_ = 1 << 20;
  double clock_s_ = 0;
  std::vector<double> marks_;
};

}  // namespace tessel::testing
