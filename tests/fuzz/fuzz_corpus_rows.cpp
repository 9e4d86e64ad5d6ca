// libFuzzer target: a file of published runs (corpus/published/*.json, `tessel
// calibrate --published DIR`) read row by row by load_published_runs: every measured
// value against its physical range, ids unique, each row's plan validated or its refusal
// kept. Seeds: the corpus's own files.
#include "fuzz_files.hpp"
#include "fuzz_reader.hpp"
#include "tessel/planner/published_runs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > tessel_fuzz::kMaxInputBytes) return -1;
  tessel_fuzz::scratch().write("rows.json", data, size);
  try {
    (void)tessel::planner::load_published_runs(tessel_fuzz::scratch().path().string());
  } catch (const tessel::Error&) {
    // A refusal with one line is the right answer to bad input.
  }
  return 0;
}
