// Errors at tessel's boundaries (files, CLI arguments, plans) are tessel::Error: one
// line that names the file or field, the value, and what is allowed. The CLI prints
// it and exits with status 2. Broken internal invariants use TESSEL_ASSERT, which
// aborts with the condition and a message: they are bugs, not user errors.
#pragma once

#include <stdexcept>
#include <string>

namespace tessel {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void assertion_failed(const char* condition, const char* file, int line,
                                   const std::string& message);

}  // namespace tessel

#define TESSEL_ASSERT(condition, message)                                     \
  do {                                                                        \
    if (!(condition)) {                                                       \
      ::tessel::assertion_failed(#condition, __FILE__, __LINE__, (message)); \
    }                                                                         \
  } while (false)
