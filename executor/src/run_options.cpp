#include "tessel/executor/run_options.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

std::vector<std::string> RunOptions::to_arguments() const {
  std::vector<std::string> out{"--plan", plan_file, "--steps", std::to_string(steps), "--seed", std::to_string(seed),
                               "--lr", fmt::format("{}", lr)};
  if (!data_file.empty()) out.insert(out.end(), {"--data", data_file});
  if (data_format != "auto") out.insert(out.end(), {"--data-format", data_format});
  if (!data_dtype.empty()) out.insert(out.end(), {"--data-dtype", data_dtype});
  if (!db.empty()) out.insert(out.end(), {"--db", db});
  if (!checkpoint.empty()) out.insert(out.end(), {"--checkpoint", checkpoint});
  if (checkpoint_every > 0) out.insert(out.end(), {"--checkpoint-every", std::to_string(checkpoint_every)});
  if (!resume.empty()) out.insert(out.end(), {"--resume", resume});
  if (!init_file.empty()) out.insert(out.end(), {"--init", init_file});
  if (!trace_file.empty()) out.insert(out.end(), {"--trace", trace_file});
  if (progress) out.insert(out.end(), {"--progress", "1"});
  if (backend != "auto") out.insert(out.end(), {"--backend", backend});
  if (!launch_key.empty()) out.insert(out.end(), {"--launch-key", launch_key});
  if (!heartbeat_dir.empty()) out.insert(out.end(), {"--heartbeat-dir", heartbeat_dir});
  if (clip_grad_norm > 0) out.insert(out.end(), {"--clip-grad-norm", fmt::format("{}", clip_grad_norm)});
  if (device_memory_bytes > 0) out.insert(out.end(), {"--device-memory-bytes", std::to_string(device_memory_bytes)});
  return out;
}

RunOptions RunOptions::from_arguments(int argc, const char* const* argv) {
  RunOptions o;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    if (i + 1 >= argc) throw Error(fmt::format("{}: missing value", key));
    const std::string value = argv[i + 1];
    if (key == "--plan") o.plan_file = value;
    else if (key == "--data") o.data_file = value;
    else if (key == "--data-format") o.data_format = value;
    else if (key == "--data-dtype") o.data_dtype = value;
    else if (key == "--db") o.db = value;
    else if (key == "--checkpoint") o.checkpoint = value;
    else if (key == "--resume") o.resume = value;
    else if (key == "--init") o.init_file = value;
    else if (key == "--steps") o.steps = std::atoi(value.c_str());
    else if (key == "--checkpoint-every") o.checkpoint_every = std::atoi(value.c_str());
    else if (key == "--seed") o.seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (key == "--lr") o.lr = std::strtof(value.c_str(), nullptr);
    else if (key == "--trace") o.trace_file = value;
    else if (key == "--progress") o.progress = value == "1";
    else if (key == "--backend") o.backend = value;
    else if (key == "--launch-key") o.launch_key = value;
    else if (key == "--heartbeat-dir") o.heartbeat_dir = value;
    else if (key == "--clip-grad-norm") o.clip_grad_norm = std::strtof(value.c_str(), nullptr);
    else if (key == "--device-memory-bytes") o.device_memory_bytes = std::strtoull(value.c_str(), nullptr, 10);
    else throw Error(fmt::format("{}: unknown option", key));
  }
  return o;
}

}  // namespace tessel::executor
