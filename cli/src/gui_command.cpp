// `tessel gui`: the plan explorer window (gui/), or an offscreen screenshot of it.
#include <memory>

#include "commands.hpp"
#include "tessel/core/error.hpp"
#include "tessel/gui/gui_app.hpp"

namespace tessel::cli {

Command add_gui_command(CLI::App& app) {
  auto options = std::make_shared<gui::GuiOptions>();
  CLI::App* cmd = app.add_subcommand("gui", "Explore plans in a window (Qt 6): search, Pareto scatter, timelines, memory, predicted vs measured");
  cmd->add_option("--plan,-p", options->plan_file, "Plan file whose model, cluster, nodes and train fill the inputs");
  cmd->add_option("--model,-m", options->inputs.model, "Model preset or file (default gpt2-1.5b)");
  cmd->add_option("--cluster,-c", options->inputs.cluster, "Cluster preset or file (default dgx-h100)");
  cmd->add_option("--nodes,-n", options->inputs.nodes, "Nodes")->capture_default_str();
  cmd->add_option("--global-batch,-b", options->inputs.global_batch, "Sequences per optimizer step");
  cmd->add_option("--run", options->run_id,
                  "A run stored by tessel run: open the compare tab on it (predicted vs measured)");
  cmd->add_option("--db", options->inputs.db,
                  "Profiles and runs database (default: $TESSEL_DB, else ~/.local/share/tessel/tessel.db)");
  cmd->add_option("--screenshot", options->screenshot,
                  "Search, render the window offscreen into this PNG and exit (no display needed)");
  cmd->add_option("--tab", options->tab, "Tab to show in the screenshot: plans, timeline, breakdown, memory, compare, whatif")
      ->capture_default_str();
  cmd->footer("The plans tab searches off the UI thread (Cancel stops it); selecting a plan simulates it (a child\n"
              "tessel simulate) for the timeline, breakdown and memory tabs; what-if sliders re-plan in the background.\n"
              "The compare tab sets a stored run (--run, or picked from the database) against its prediction:\n"
              "a parity scatter per op kind, the spread of measured/predicted over the steps, and the measured\n"
              "timeline with the prediction faint beneath each rank. A compare screenshot without --run uses the newest run.");
  return [options] {
    gui::GuiOptions run = *options;
    if (run.inputs.model.empty() != run.inputs.cluster.empty()) {
      throw tessel::Error("--model and --cluster: give both, or neither for the defaults");
    }
    return gui::run_gui(run);
  };
}

}  // namespace tessel::cli
