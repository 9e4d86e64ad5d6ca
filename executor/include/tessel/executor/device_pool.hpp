// The budgeted device pool: where model-state chunks live while they are on the device.
// It holds real memory (the backend's: host memory on a CPU rank, device memory on a
// GPU) and a byte budget, the plan's device memory. Before every op the manager tells
// the pool the op's id and the traced non-model memory (activations, workspace) at it;
// the pool refuses, with a DeviceBudgetExceeded naming the op, any moment where model
// states plus that memory would exceed the budget: at the op itself, and at every
// allocation made while it runs. So a run that finishes never exceeded its budget, and
// peak_bytes() is the highest model + non-model total any op saw.
//
// The pool is a counter over the backend's allocator with a cache of freed blocks by
// size (chunk and bucket sizes repeat every pass, and a fresh CPU allocation of
// megabytes costs page faults): live blocks count as model states; cached ones are
// given back to the backend when an allocation would otherwise put live + cached +
// non-model memory over the budget.
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
