// The budgeted device pool where model-state chunks live on the device: real backend memory and
// a byte budget, the plan's device memory. The manager reports each op's id and traced
// non-model memory; any moment where model states plus that exceed the budget throws
// DeviceBudgetExceeded naming the op, so a finished run never exceeded it. Freed blocks are
// cached by size (sizes repeat every pass) and given back when the budget needs the room.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tessel/core/error.hpp"
#include "tessel/executor/buffer.hpp"
#include "tessel/kernels/backend.hpp"

namespace tessel::executor {

// The device memory budget would be exceeded at `op`: model states plus non-model
// memory needed `needed_bytes`, more than `budget_bytes`.
class DeviceBudgetExceeded : public Error {
 public:
  DeviceBudgetExceeded(std::string op, std::size_t needed_bytes, std::size_t budget_bytes);
  const std::string& op() const { return op_; }
  std::size_t needed_bytes() const { return needed_bytes_; }
  std::size_t budget_bytes() const { return budget_bytes_; }

 private:
  std::string op_;
  std::size_t needed_bytes_, budget_bytes_;
};

class DevicePool final : public BufferMemory {
 public:
  DevicePool(kernels::Backend& backend, std::size_t budget_bytes);
  ~DevicePool() override;
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // An op starts with `non_model_bytes` of other memory live: checked against the budget.
  void enter_op(std::string_view op, std::size_t non_model_bytes);
  // Outside steps (checkpoints, whole-model views) the budget is not enforced.
  void set_enforcing(bool enforcing) { enforcing_ = enforcing; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer) override;

  std::size_t budget_bytes() const { return budget_bytes_; }
  std::size_t model_bytes() const { return model_bytes_; }  // model states in the pool now
  std::size_t peak_bytes() const { return peak_bytes_; }    // model + non-model, the most any op saw
  std::size_t peak_model_bytes() const { return peak_model_bytes_; }
  std::size_t cached_bytes() const { return cached_bytes_; }
  const std::string& op() const { return op_; }

 private:
  void charge(std::size_t model_bytes);

  kernels::Backend& backend_;
  std::size_t budget_bytes_;
  bool enforcing_ = true;
  std::size_t model_bytes_ = 0, non_model_bytes_ = 0, peak_bytes_ = 0, peak_model_bytes_ = 0;
  std::string op_ = "start";
  std::unordered_map<void*, std::size_t> sizes_;
  std::unordered_multimap<std::size_t, void*> cached_;  // freed blocks by size
  std::size_t cached_bytes_ = 0;
};

}  // namespace tessel::executor
