// One rank's memory by category (core/memory_comparison.hpp): bytes live, each category's peak,
// the peak of the total and the mix at that moment. A Buffer allocating while a ledger is current
// on its thread (MemoryLedger::Scope, opened by the Trainer's public calls) charges it under its
// category; allocation is rare, so counting costs the hot path nothing. Not thread-safe. Offload's
// host-resident states are counted apart (host_allocated/host_freed) from the device's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "tessel/core/memory_comparison.hpp"

namespace tessel::executor {

struct MemoryCounts {
  std::array<std::int64_t, kMemoryCategories> bytes{};
  std::int64_t operator[](MemoryCategory c) const { return bytes[std::size_t(c)]; }
  std::int64_t total() const {
    std::int64_t sum = 0;
    for (std::int64_t b : bytes) sum += b;
    return sum;
  }
};

class MemoryLedger {
 public:
  void allocated(MemoryCategory category, std::size_t bytes);
  void freed(MemoryCategory category, std::size_t bytes);
  // Bytes that stay allocated but now count under another category.
  void moved(MemoryCategory from, MemoryCategory to, std::size_t bytes);
  // Offload's model states in host memory.
  void host_allocated(std::size_t bytes);
  void host_freed(std::size_t bytes);
  std::int64_t host_peak_bytes() const { return host_peak_; }

  const MemoryCounts& live() const { return live_; }
  const MemoryCounts& peaks() const { return peaks_; }             // each category's own peak
  std::int64_t total_peak_bytes() const { return total_peak_; }    // the peak of the sum
  const MemoryCounts& at_total_peak() const { return at_total_peak_; }
  // Peaks restart from what is live now (e.g. after the first step, to see steady state).
  void reset_peaks();

  // The ledger Buffers charge on this thread while the scope lives (nestable; null: none).
  static MemoryLedger* current();
  class Scope {
   public:
    explicit Scope(MemoryLedger& ledger);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    MemoryLedger* previous_;
  };

 private:
  void note_peaks();
  MemoryCounts live_, peaks_, at_total_peak_;
  std::int64_t total_live_ = 0, total_peak_ = 0, host_live_ = 0, host_peak_ = 0;
};

// The ledger's peaks as one rank's measurement (device and process peaks left to the
// caller, who knows the backend and the process).
RankMemoryMeasured measured_memory(const MemoryLedger& ledger, int rank);

}  // namespace tessel::executor
