#include "tessel/gui/gui_app.hpp"

#include <QApplication>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/gui/plan_explorer.hpp"

namespace tessel::gui {

int run_gui(const GuiOptions& options) {
  if (options.tab != "plans" && options.tab != "timeline" && options.tab != "breakdown" && options.tab != "memory" &&
      options.tab != "whatif") {
    throw Error(fmt::format("--tab: must be plans, timeline, breakdown, memory or whatif (compare comes with the GUI "
                            "issue), got {}",
                            options.tab));
  }
  planner::SearchInputs inputs = options.inputs;
  if (!options.plan_file.empty()) {
    const Plan plan = Plan::load(options.plan_file);
    inputs.model = plan.model.name;
    inputs.cluster = plan.cluster.name;
    inputs.nodes = plan.nodes;
    inputs.global_batch = plan.train.global_batch;
    inputs.seq = plan.train.seq_len;
    inputs.precision = std::string(to_string(plan.train.precision));
    inputs.optimizer = std::string(to_string(plan.train.optimizer));
    if (plan.cluster.ranks_fill_node()) inputs.ranks = plan.parallel.world_size();
  }
  // Offscreen for screenshots: no display needed.
  if (!options.screenshot.empty() && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
    qputenv("QT_QPA_PLATFORM", "offscreen");
  }
  int argc = 1;
  char name[] = "tessel";
  char* argv[] = {name, nullptr};
  QApplication app(argc, argv);
  PlanExplorer window;
  if (!inputs.model.empty()) window.set_inputs(inputs);
  if (options.screenshot.empty()) {
    window.show();
    return app.exec();
  }
  if (!window.validation_error().isEmpty()) throw Error(window.validation_error().toStdString());
  window.start_search();
  window.wait_for_search(600000);
  window.select_plan(0);  // simulates it for the other tabs
  if (options.tab == "whatif") {
    // Twice and four times the nodes, for the picture.
    const planner::SearchInputs current = window.inputs();
    for (int factor : {1, 2, 4}) {
      window.set_what_if(current.nodes * factor, 50, current.global_batch);
      window.wait_for_what_if(600000);
    }
  } else if (options.tab != "plans") {
    window.wait_for_simulation(600000);
    if (!window.simulation_error().isEmpty()) throw Error(window.simulation_error().toStdString());
  }
  window.show_tab(QString::fromStdString(options.tab));
  window.show();
  QApplication::processEvents();
  if (!window.save_screenshot(QString::fromStdString(options.screenshot))) {
    throw Error(fmt::format("--screenshot: {}: cannot write", options.screenshot));
  }
  std::printf("wrote %s (tab %s)\n", options.screenshot.c_str(), options.tab.c_str());
  return 0;
}

}  // namespace tessel::gui
