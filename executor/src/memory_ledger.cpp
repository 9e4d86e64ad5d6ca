#include "tessel/executor/memory_ledger.hpp"

#include <algorithm>

#include "tessel/core/error.hpp"

namespace tessel::executor {

namespace {
thread_local MemoryLedger* current_ledger = nullptr;
}

void MemoryLedger::allocated(MemoryCategory category, std::size_t bytes) {
  live_.bytes[std::size_t(category)] += std::int64_t(bytes);
  total_live_ += std::int64_t(bytes);
  note_peaks();
}

void MemoryLedger::freed(MemoryCategory category, std::size_t bytes) {
  std::int64_t& live = live_.bytes[std::size_t(category)];
  TESSEL_ASSERT(live >= std::int64_t(bytes), "a ledger frees no more than its category holds");
  live -= std::int64_t(bytes);
  total_live_ -= std::int64_t(bytes);
}

void MemoryLedger::moved(MemoryCategory from, MemoryCategory to, std::size_t bytes) {
  if (from == to) return;
  std::int64_t& source = live_.bytes[std::size_t(from)];
  TESSEL_ASSERT(source >= std::int64_t(bytes), "a ledger moves no more than its category holds");
  source -= std::int64_t(bytes);
  live_.bytes[std::size_t(to)] += std::int64_t(bytes);
  note_peaks();
}

void MemoryLedger::host_allocated(std::size_t bytes) {
  host_live_ += std::int64_t(bytes);
  host_peak_ = std::max(host_peak_, host_live_);
}

void MemoryLedger::host_freed(std::size_t bytes) {
  TESSEL_ASSERT(host_live_ >= std::int64_t(bytes), "a ledger frees no more host memory than it holds");
  host_live_ -= std::int64_t(bytes);
}

void MemoryLedger::note_peaks() {
  for (std::size_t c = 0; c < kMemoryCategories; ++c) peaks_.bytes[c] = std::max(peaks_.bytes[c], live_.bytes[c]);
  if (total_live_ > total_peak_) {
    total_peak_ = total_live_;
    at_total_peak_ = live_;
  }
}

void MemoryLedger::reset_peaks() {
  peaks_ = live_;
  at_total_peak_ = live_;
  total_peak_ = total_live_;
}

RankMemoryMeasured measured_memory(const MemoryLedger& ledger, int rank) {
  RankMemoryMeasured out;
  out.rank = rank;
  out.by_category = true;
  for (std::size_t c = 0; c < kMemoryCategories; ++c) {
    out.peak_bytes[c] = double(ledger.peaks().bytes[c]);
    out.at_total_peak_bytes[c] = double(ledger.at_total_peak().bytes[c]);
  }
  out.total_peak_bytes = double(ledger.total_peak_bytes());
  out.host_state_bytes = double(ledger.host_peak_bytes());
  return out;
}

MemoryLedger* MemoryLedger::current() { return current_ledger; }

MemoryLedger::Scope::Scope(MemoryLedger& ledger) : previous_(current_ledger) { current_ledger = &ledger; }
MemoryLedger::Scope::~Scope() { current_ledger = previous_; }

}  // namespace tessel::executor
