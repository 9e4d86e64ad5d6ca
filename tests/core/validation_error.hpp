// The one line a plan's validation gives, or "(valid)": core tests compare it word for word.
#pragma once

#include <string>

#include "tessel/core/error.hpp"
#include "tessel/core/plan.hpp"

namespace tessel::test {

inline std::string validation_error(const Plan& plan) {
  try {
    plan.validate();
  } catch (const Error& error) {
    return error.what();
  }
  return "(valid)";
}

}  // namespace tessel::test
