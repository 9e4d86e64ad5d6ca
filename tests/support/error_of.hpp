// The one-line message of the tessel::Error an action raises, which tests compare word for
// word; "(no error)" when it raises none. Any other exception fails the test: the fuzzers'
// findings were library errors escaping as something other than tessel::Error.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "tessel/core/error.hpp"

namespace tessel::test {

template <class Action>
std::string error_of(Action&& action, const std::string& if_none = "(no error)") {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  } catch (const std::exception& other) {
    ADD_FAILURE() << "not a tessel::Error: " << other.what();
    return "(another exception)";
  }
  return if_none;
}

}  // namespace tessel::test
