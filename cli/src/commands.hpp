// The `tessel` subcommands. Each registers its options on the CLI11 app and returns
// the callback that runs it; errors are thrown as tessel::Error and turned into one
// line and exit status 2 by main().
#pragma once

#include <atomic>
#include <functional>

#include <CLI/CLI.hpp>

namespace tessel::cli {

// Set by the SIGINT handler; long work polls it and stops cleanly.
std::atomic<bool>& cancel_flag();

using Command = std::function<int()>;

Command add_plan_command(CLI::App& app);
Command add_estimate_command(CLI::App& app);
Command add_sweep_command(CLI::App& app);
Command add_capacity_command(CLI::App& app);
Command add_presets_command(CLI::App& app);
Command add_profile_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_gui_command(CLI::App& app);
Command add_compare_command(CLI::App& app);
Command add_export_weights_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_calibrate_command(CLI::App& app);

}  // namespace tessel::cli
