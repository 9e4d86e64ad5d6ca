// What the weight-export tests of each family (GPT-2, LLaMA, Mixtral) do alike: a seeded
// model's initial weights, and training on from weights exported and read back beside the
// run that wrote them. Nothing here asserts: the TEST bodies compare.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "fixtures.hpp"
#include "safetensors_reader.hpp"
#include "tessel/executor/data_loader.hpp"
#include "tessel/executor/hf_export.hpp"
#include "tessel/executor/hf_gpt2.hpp"

namespace tessel_executor_test {

// The initial weights of `plan`'s model on one rank, seed 7.
inline std::vector<float> initial_weights(const tessel::Plan& plan) {
  return OneRank(plan, tessel::executor::synthetic_corpus(4096, 1), 7).trainer.whole_parameters();
}

struct ReimportedTraining {
  std::vector<float> exported;   // the seed-7 run's initial weights
  std::vector<float> read_back;  // what the reader gave for them
  std::vector<tessel::executor::StepStats> reference, imported;  // per step
  bool another_seed_differs = false;  // a seed-8 run without the import lost another loss at some step
  std::vector<float> reference_weights, imported_weights;  // after the steps
};

// A seed-7 run's initial weights written by `write(file, weights)` and read back by
// `read(file)` into a seed-8 run; both train `steps` steps beside a seed-8 run left alone.
template <class Write, class Read>
ReimportedTraining train_reimported(const tessel::Plan& plan, const std::string& file, int steps, Write write,
                                    Read read) {
  const std::string text = tessel::executor::synthetic_corpus(8192, 3);
  OneRank reference(plan, text, 7), imported(plan, text, 8), other(plan, text, 8);
  ReimportedTraining run;
  run.exported = reference.trainer.whole_parameters();
  write(file, run.exported);
  run.read_back = read(file);
  imported.trainer.set_whole_parameters(run.read_back);
  for (int step = 0; step < steps; ++step) {
    run.reference.push_back(reference.trainer.step());
    run.imported.push_back(imported.trainer.step());
    run.another_seed_differs = run.another_seed_differs || other.trainer.step().loss != run.reference.back().loss;
  }
  run.reference_weights = reference.trainer.whole_parameters();
  run.imported_weights = imported.trainer.whole_parameters();
  return run;
}

// `weights` of `plan`'s model written by write_hf_export (f32) to `file` with `metadata`,
// and read back by the tests' own reader (safetensors_reader.hpp).
inline tessel_safetensors_test::Parsed hf_export_parsed(const tessel::Plan& plan, const std::vector<float>& weights,
                                                        const std::string& file,
                                                        const std::map<std::string, std::string>& metadata = {}) {
  tessel::executor::write_hf_export(file, plan.model, weights, tessel::executor::SafetensorsDType::f32, metadata);
  return tessel_safetensors_test::parse(tessel_safetensors_test::slurp(file));
}

// The same through the export and import of a family: GPT-2's (write_gpt2_export) or the
// Hugging Face family of the model (write_hf_export: LLaMA, Mixtral).
enum class ExportFamily { gpt2, hf };
inline ReimportedTraining train_reimported(const tessel::Plan& plan, const std::string& file, int steps,
                                           ExportFamily family) {
  using namespace tessel::executor;
  return train_reimported(
      plan, file, steps,
      [&](const std::string& path, const std::vector<float>& weights) {
        if (family == ExportFamily::gpt2) {
          write_gpt2_export(path, plan.model, weights, SafetensorsDType::f32, {});
        } else {
          write_hf_export(path, plan.model, weights, SafetensorsDType::f32, {});
        }
      },
      [&](const std::string& path) {
        const SafetensorsFile read = SafetensorsFile::read(path, "--init");
        return family == ExportFamily::gpt2 ? whole_model_from_gpt2(read, plan.model)
                                            : whole_model_from_hf(read, plan.model);
      });
}

// Whether the imported run's losses (and MoE auxiliary losses) equal the reference's bit
// for bit at every step.
inline ::testing::AssertionResult bit_identical_losses(const ReimportedTraining& run) {
  for (std::size_t step = 0; step < run.reference.size(); ++step) {
    const tessel::executor::StepStats &want = run.reference[step], &got = run.imported[step];
    if (std::memcmp(&want.loss, &got.loss, sizeof want.loss) != 0 ||
        std::memcmp(&want.aux_loss, &got.aux_loss, sizeof want.aux_loss) != 0) {
      return ::testing::AssertionFailure() << "step " << step + 1 << ": " << want.loss << " vs " << got.loss
                                           << " (auxiliary " << want.aux_loss << " vs " << got.aux_loss << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tessel_executor_test
