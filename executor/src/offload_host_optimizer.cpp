// The host optimizer (host_optimizer.hpp). This file is built with the CPU kernels' -march
// so that Eigen's packet size here is the one the CPU backend was built with: the split
// of a reference call into scalar head, vector body and scalar tail is Eigen's
// (first_aligned on the weights' address, then whole packets).
#include <Eigen/Core>

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "tessel/executor/host_optimizer.hpp"

namespace tessel::executor {

namespace {

constexpr std::int64_t kPacket = Eigen::internal::packet_traits<float>::size;
constexpr std::size_t kPacketBytes = std::size_t(kPacket) * sizeof(float);

struct AlignedFloats {
  explicit AlignedFloats(std::size_t n)
      : data(static_cast<float*>(::operator new(std::max<std::size_t>(n, 1) * sizeof(float), std::align_val_t(64)))) {
    std::fill_n(data, n, 0.0f);
  }
  ~AlignedFloats() { ::operator delete(data, std::align_val_t(64)); }
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  float* data;
};

// One piece (at most a block) as its reference call computed it.
void adamw_like_reference(const HostAdamWPiece& piece, const kernels::AdamWParams& p, const float* scale) {
  kernels::Backend& cpu = kernels::cpu_backend();
  const ReferenceCall& r = piece.reference;
  // Eigen's head: elements until the weights' address is packet-aligned.
  const std::int64_t head =
      r.param_address % sizeof(float) != 0
          ? r.size
          : std::min<std::int64_t>(r.size, std::int64_t((kPacketBytes - r.param_address % kPacketBytes) % kPacketBytes /
                                                        sizeof(float)));
  const std::int64_t body_end = head + (r.size - head) / kPacket * kPacket;
  const std::int64_t lo = r.first, hi = r.first + piece.n;
  auto scalar = [&](std::int64_t from, std::int64_t to) {
    for (std::int64_t i = from; i < to; ++i) {
      const std::int64_t k = i - lo;
      cpu.adamw_step(Stream::compute, piece.param + k, piece.grad + k, piece.m + k, piece.v + k, 1, p, scale);
    }
  };
  scalar(lo, std::min(hi, head));
  const std::int64_t body_lo = std::max(lo, head), body_hi = std::min(hi, body_end);
  if (body_lo < body_hi) {
    // Whole packets of the reference's body around [body_lo, body_hi), in aligned scratch.
    const std::int64_t from = head + (body_lo - head) / kPacket * kPacket;
    const std::int64_t to = head + (body_hi - head + kPacket - 1) / kPacket * kPacket;
    const std::size_t n = std::size_t(to - from), at = std::size_t(body_lo - from), count = std::size_t(body_hi - body_lo);
    const std::int64_t k = body_lo - lo;
    AlignedFloats param(n), grad(n), m(n), v(n);
    std::memcpy(param.data + at, piece.param + k, count * sizeof(float));
    std::memcpy(grad.data + at, piece.grad + k, count * sizeof(float));
    std::memcpy(m.data + at, piece.m + k, count * sizeof(float));
    std::memcpy(v.data + at, piece.v + k, count * sizeof(float));
    cpu.adamw_step(Stream::compute, param.data, grad.data, m.data, v.data, std::int64_t(n), p, scale);
    std::memcpy(piece.param + k, param.data + at, count * sizeof(float));
    std::memcpy(piece.m + k, m.data + at, count * sizeof(float));
    std::memcpy(piece.v + k, v.data + at, count * sizeof(float));
  }
  scalar(std::max(lo, body_end), hi);
}

}  // namespace

void host_adamw_step(std::span<const HostAdamWPiece> pieces, const kernels::AdamWParams& params,
                     const float* grad_scale) {
  std::vector<HostAdamWPiece> blocks;
  for (const HostAdamWPiece& piece : pieces) {
    for (std::int64_t at = 0; at < piece.n; at += kHostOptimizerBlockElements) {
      HostAdamWPiece block = piece;
      block.param += at, block.grad += at, block.m += at, block.v += at;
      block.n = std::min(kHostOptimizerBlockElements, piece.n - at);
      block.reference.first += at;
      blocks.push_back(block);
    }
  }
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, blocks.size(), 1), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i) adamw_like_reference(blocks[i], params, grad_scale);
  });
}

void host_adamw_step(float* param, const float* grad, float* m, float* v, std::int64_t n,
                     const kernels::AdamWParams& params, const float* grad_scale) {
  const HostAdamWPiece piece{param, grad, m, v, n, {reinterpret_cast<std::uintptr_t>(param), n, 0}};
  host_adamw_step(std::span(&piece, 1), params, grad_scale);
}

}  // namespace tessel::executor
