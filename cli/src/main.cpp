// tessel: plan, simulate and run parallel transformer training.
// Exit status: 0 success, 2 bad input (one line naming the field), 130 cancelled.
#include <csignal>
#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "commands.hpp"
#include "tessel/core/process_memory.hpp"
#include "tessel/core/error.hpp"

namespace tessel::cli {
std::atomic<bool>& cancel_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}
}  // namespace tessel::cli

namespace {
void on_interrupt(int) { tessel::cli::cancel_flag().store(true); }
}  // namespace

int main(int argc, char** argv) {
  using namespace tessel::cli;
  CLI::App app{
      "tessel plans, simulates and runs large-scale parallel training of transformer models.\n"
      "Presets: `tessel presets`. Every command has --help.",
      "tessel"};
  app.set_version_flag("--version", "tessel 0.1.0");
  app.require_subcommand(1);
  app.fallthrough(false);

  std::map<CLI::App*, Command> commands;
  auto add = [&](Command (*adder)(CLI::App&)) {
    const std::size_t before = app.get_subcommands({}).size();
    Command command = adder(app);
    commands[app.get_subcommands({}).at(before)] = std::move(command);
  };
  add(add_plan_command);
  add(add_estimate_command);
  add(add_sweep_command);
  add(add_capacity_command);
  add(add_presets_command);
  add(add_profile_command);
  add(add_simulate_command);
  add(add_run_command);
  add(add_compare_command);
  add(add_gui_command);
  add(add_export_weights_command);
  add(add_export_command);
  add(add_calibrate_command);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }

  std::signal(SIGINT, on_interrupt);
  try {
    for (CLI::App* sub : app.get_subcommands()) return commands.at(sub)();
  } catch (const tessel::Error& error) {
    std::fprintf(stderr, "tessel: error: %s\n", error.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tessel: error: %s\n", tessel::out_of_memory_message().c_str());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "tessel: unexpected error: %s\n", error.what());
    return 1;
  }
  return 0;
}
