// `tessel gui`: opens the plan explorer, or renders it offscreen into a PNG and exits.
#pragma once

#include <cstdint>
#include <string>

#include "tessel/planner/search_inputs.hpp"

namespace tessel::gui {

struct GuiOptions {
  planner::SearchInputs inputs;  // inputs.db is also the runs database of the compare tab
  std::string plan_file;   // the plan's model, cluster, nodes and train fill the inputs
  std::int64_t run_id = 0;  // a stored run to compare with its prediction; 0: none
  std::string screenshot;  // PNG to write after a search, offscreen; empty: open the window
  std::string tab = "plans";
};

// Throws tessel::Error on a bad plan file, run id or tab name.
int run_gui(const GuiOptions& options);

}  // namespace tessel::gui
