// The largest values tessel accepts from outside input (plan, model, cluster and profile
// files, command-line flags). They are far beyond any real training job, and each keeps
// the arithmetic that uses it inside the integer types it is computed in (int for shapes
// and counts, int64 for parameter counts), so a huge number is refused with its bound
// instead of wrapping into a small or negative one and giving a silent wrong answer.
#pragma once

#include <cstdint>
#include <limits>

namespace tessel::limits {

// Any integer field that is stored in an int.
inline constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
// Model shape.
inline constexpr std::int64_t kMaxLayers = 1'000'000;
inline constexpr std::int64_t kMaxSeqLen = std::int64_t(1) << 24;
inline constexpr std::int64_t kMaxHidden = std::int64_t(1) << 20;     // hidden, heads, kv_heads
inline constexpr std::int64_t kMaxFfnHidden = std::int64_t(1) << 22;
inline constexpr std::int64_t kMaxVocab = std::int64_t(1) << 24;
inline constexpr std::int64_t kMaxExperts = std::int64_t(1) << 16;  // moe.experts, top_k, shared_experts
inline constexpr double kMaxParameters = 1e15;
// Sequences per optimizer step, and so micro-batches per step.
inline constexpr std::int64_t kMaxGlobalBatch = std::int64_t(1) << 24;
// GPUs (ranks) in a plan: nodes x GPUs per node, and dp x pp x tp x sp.
inline constexpr std::int64_t kMaxGpus = std::int64_t(1) << 24;

// Input files: bytes read from one file, and how deep JSON arrays and objects may nest.
inline constexpr std::int64_t kMaxInputFileBytes = std::int64_t(64) << 20;
inline constexpr int kMaxJsonDepth = 64;

// A device: peak rates, memory and its bandwidth (1000x today's largest, and more).
inline constexpr double kMaxFlopsPerS = 1e19;
inline constexpr double kMaxDeviceBytes = 1e16;
inline constexpr double kMaxBytesPerS = 1e16;

// Imported measurements: one kernel or collective timing, and one collective's size.
inline constexpr double kMinMeasuredSeconds = 1e-9;
inline constexpr double kMaxMeasuredSeconds = 3600;
// A sample's spread, (p90 - p10) / median: beyond 100 it says only "noise" (the sample is
// flagged long before, at 0.2), so measurements clamp to it and readers accept up to it.
// Under heavy oversubscription an MPI collective's p90 can be hundreds of medians.
inline constexpr double kMaxSampleSpread = 100;
inline constexpr double kMaxMeasuredBytes = 1e15;
inline constexpr std::int64_t kMaxKernelElements = std::int64_t(1) << 40;

}  // namespace tessel::limits
