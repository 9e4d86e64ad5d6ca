// The budgeted device pool (device_pool.hpp): every allocation and every op is checked
// against the budget before it happens, so the peak can never pass it unnoticed.
#include "tessel/executor/device_pool.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace tessel::executor {

DeviceBudgetExceeded::DeviceBudgetExceeded(std::string op, std::size_t needed_bytes, std::size_t budget_bytes)
    : Error(fmt::format("device memory: op {} needs {} bytes of model states and non-model memory, more than the "
                        "budget of {} bytes",
                        op, needed_bytes, budget_bytes)),
      op_(std::move(op)),
      needed_bytes_(needed_bytes),
      budget_bytes_(budget_bytes) {}

DevicePool::DevicePool(kernels::Backend& backend, std::size_t budget_bytes)
    : backend_(backend), budget_bytes_(budget_bytes) {}

DevicePool::~DevicePool() {
  for (auto& [pointer, bytes] : sizes_) backend_.deallocate(pointer);
  for (auto& [bytes, pointer] : cached_) backend_.deallocate(pointer);
}

void DevicePool::charge(std::size_t model_bytes) {
  if (!enforcing_) return;
  const std::size_t total = model_bytes + non_model_bytes_;
  if (total > budget_bytes_) throw DeviceBudgetExceeded(op_, total, budget_bytes_);
  peak_bytes_ = std::max(peak_bytes_, total);
  peak_model_bytes_ = std::max(peak_model_bytes_, model_bytes);
}

void DevicePool::enter_op(std::string_view op, std::size_t non_model_bytes) {
  op_.assign(op);
  non_model_bytes_ = non_model_bytes;
  charge(model_bytes_);
}

void* DevicePool::allocate(std::size_t bytes) {
  charge(model_bytes_ + bytes);
  void* pointer = nullptr;
  if (const auto hit = cached_.find(bytes); hit != cached_.end()) {
    pointer = hit->second;
    cached_.erase(hit);
    cached_bytes_ -= bytes;
  } else {
    // Cached blocks of other sizes go back to the backend while they would crowd the budget.
    while (!cached_.empty() && model_bytes_ + cached_bytes_ + bytes + non_model_bytes_ > budget_bytes_) {
      const auto block = cached_.begin();
      backend_.deallocate(block->second);
      cached_bytes_ -= block->first;
      cached_.erase(block);
    }
    pointer = backend_.allocate(bytes);
  }
  sizes_.emplace(pointer, bytes);
  model_bytes_ += bytes;
  return pointer;
}

void DevicePool::deallocate(void* pointer) {
  const auto it = sizes_.find(pointer);
  TESSEL_ASSERT(it != sizes_.end(), "the pool frees only its own blocks");
  model_bytes_ -= it->second;
  cached_.emplace(it->second, pointer);
  cached_bytes_ += it->second;
  sizes_.erase(it);
}

}  // namespace tessel::executor
