// The commands a field build of tessel leaves out (TESSEL_WITH_SIMULATOR or TESSEL_WITH_GUI
// off: the GPU bundle, where SimGrid, ns-3 and Qt would triple its size): each is still
// listed in --help and answers in one line where it can be run instead, exit status 2.
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "tessel/core/error.hpp"

namespace tessel::cli {

namespace {
Command left_out(CLI::App& app, const std::string& name, const std::string& what, const std::string& needs) {
  CLI::App* cmd = app.add_subcommand(name, what + " (not in this build: it needs " + needs + ")");
  cmd->allow_extras();
  return [name, needs] {
    throw Error(fmt::format("{}: not in this build of tessel (built without {}, as the GPU bundle is); run it where "
                            "tessel was built in full, on the files this one wrote (a runs or profiles database)",
                            name, needs));
    return 2;
  };
}
}  // namespace

Command add_simulate_command(CLI::App& app) {
  return left_out(app, "simulate", "Simulate one plan's step on SimGrid", "the simulator");
}
Command add_compare_command(CLI::App& app) {
  return left_out(app, "compare", "Set a stored run against its plan's simulation", "the simulator");
}
Command add_calibrate_command(CLI::App& app) {
  return left_out(app, "calibrate", "Fit a profile to published or measured runs", "the simulator");
}
Command add_gui_command(CLI::App& app) { return left_out(app, "gui", "The plan explorer window", "Qt"); }

}  // namespace tessel::cli
