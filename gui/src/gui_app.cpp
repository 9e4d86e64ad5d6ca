#include "tessel/gui/gui_app.hpp"

#include <QApplication>
#include <QElapsedTimer>
#include <QScreen>
#include <QTemporaryDir>
#include <QWindow>
#include <array>
#include <optional>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/json_fields.hpp"
#include "tessel/core/presets.hpp"
#include "tessel/gui/compare_view.hpp"
#include "tessel/gui/plan_explorer.hpp"
#include "tessel/profiles/profile_store.hpp"
#include "tessel/profiles/run_store.hpp"

namespace tessel::gui {

namespace {
constexpr std::array kTabs = {"plans", "timeline", "breakdown", "memory", "compare", "whatif"};

// A preset by its name; a model or cluster written inline in a plan goes to a file in
// `scratch` that the inputs name instead (the inputs take a preset or a file).
std::string preset_or_file(const std::string& kind, const std::string& name, const Json& spec,
                           const QTemporaryDir& scratch) {
  const std::vector<std::string> presets = preset_names(kind);
  if (std::find(presets.begin(), presets.end(), name) != presets.end()) return name;
  const std::string file = scratch.filePath(QString::fromStdString(name + ".json")).toStdString();
  write_text_file_atomically(file, spec.dump(1) + "\n");
  return file;
}

void fill_inputs_from_plan(const Plan& plan, planner::SearchInputs& inputs, const QTemporaryDir& scratch) {
  inputs.model = preset_or_file("models", plan.model.name, plan.model.to_json(), scratch);
  inputs.cluster = preset_or_file("clusters", plan.cluster.name, plan.cluster.to_json(), scratch);
  inputs.nodes = plan.nodes;
  inputs.global_batch = plan.train.global_batch;
  inputs.seq = plan.train.seq_len;
  inputs.precision = std::string(to_string(plan.train.precision));
  inputs.optimizer = std::string(to_string(plan.train.optimizer));
  inputs.kernels = std::string(to_string(plan.train.kernels));
  inputs.framework = std::string(to_string(plan.train.framework));
  if (plan.cluster.ranks_fill_node()) inputs.ranks = plan.parallel.world_size();
}

// The run to compare: the one asked for, else (for a compare screenshot) the newest.
std::optional<profiles::RunRecord> find_run(const GuiOptions& options) {
  if (options.run_id == 0 && options.tab != "compare") return std::nullopt;
  const std::string db = options.inputs.db.empty() ? profiles::ProfileStore::default_path() : options.inputs.db;
  profiles::ProfileStore store(db, profiles::ProfileStore::Access::read_only);
  profiles::RunStore runs(store);
  if (options.run_id == 0) {
    const std::vector<profiles::RunRecord> all = runs.runs();
    if (all.empty()) throw Error(fmt::format("--tab compare: {} holds no runs; store one with tessel run", db));
    return all.back();
  }
  std::optional<profiles::RunRecord> run = runs.run(options.run_id);
  if (!run) throw Error(fmt::format("--run: {}: no such run in {}", options.run_id, db));
  return run;
}

// The window as the display shows it: read back from the screen on a real display (under
// Xvfb too), rendered by the widgets offscreen.
QPixmap capture(PlanExplorer& window) {
  if (QGuiApplication::platformName() == "offscreen") return window.grab();
  QElapsedTimer timer;
  timer.start();
  while ((window.windowHandle() == nullptr || !window.windowHandle()->isExposed()) && timer.elapsed() < 10000) {
    QApplication::processEvents(QEventLoop::AllEvents, 50);
  }
  // Let the first frames reach the screen.
  for (int i = 0; i < 20; ++i) QApplication::processEvents(QEventLoop::AllEvents, 25);
  return window.screen()->grabWindow(window.winId());
}
// Qt's two notices of an offscreen or bare root session say nothing a user can act on;
// every other message goes through.
QtMessageHandler qt_default_handler = nullptr;
void drop_session_notices(QtMsgType type, const QMessageLogContext& context, const QString& message) {
  if (message.contains("propagateSizeHints") || message.contains("XDG_RUNTIME_DIR")) return;
  qt_default_handler(type, context, message);
}

}  // namespace

int run_gui(const GuiOptions& options) {
  if (std::find(kTabs.begin(), kTabs.end(), options.tab) == kTabs.end()) {
    throw Error(fmt::format("--tab: must be plans, timeline, breakdown, memory, compare or whatif, got {}", options.tab));
  }
  if (options.run_id < 0) throw Error(fmt::format("--run: must be a positive run id, got {}", options.run_id));
  planner::SearchInputs inputs = options.inputs;
  const QTemporaryDir scratch;
  if (!options.plan_file.empty()) fill_inputs_from_plan(Plan::load(options.plan_file), inputs, scratch);
  // Offscreen for screenshots unless the caller picked a platform (the Xvfb test does).
  if (!options.screenshot.empty() && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
    qputenv("QT_QPA_PLATFORM", "offscreen");
  }
  const std::optional<profiles::RunRecord> run = find_run(options);
  // Qt without a display aborts with advice to reinstall; say what is missing instead.
  // Platforms other than X11 and Wayland (offscreen, vnc, eglfs) need neither variable.
  const QByteArray platform = qgetenv("QT_QPA_PLATFORM");
  const bool windowing_platform = platform.isEmpty() || platform.startsWith("xcb") || platform.startsWith("wayland");
  if (options.screenshot.empty() && windowing_platform && qEnvironmentVariableIsEmpty("DISPLAY") &&
      qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY")) {
    throw Error("gui: no display (DISPLAY and WAYLAND_DISPLAY are unset): run it in a desktop session or over ssh -X, "
                "or render the window into a file with --screenshot FILE.png [--tab plans|timeline|...]");
  }
  if (run && options.plan_file.empty()) fill_inputs_from_plan(Plan::from_json(run->plan), inputs, scratch);
  qt_default_handler = qInstallMessageHandler(drop_session_notices);
  int argc = 1;
  char name[] = "tessel";
  char* argv[] = {name, nullptr};
  QApplication app(argc, argv);
  PlanExplorer window;
  if (!inputs.model.empty()) window.set_inputs(inputs);
  window.compare_view()->set_database(QString::fromStdString(options.inputs.db));
  if (options.screenshot.empty()) {
    window.show();
    if (run) {
      window.compare_view()->show_run(run->id);
      window.show_tab("compare");
    }
    return app.exec();
  }
  if (!window.validation_error().isEmpty()) throw Error(window.validation_error().toStdString());
  if (options.tab == "compare") {
    if (!window.compare_view()->show_run(run->id) || !window.compare_view()->wait(600000) ||
        !window.compare_view()->error().isEmpty()) {
      throw Error(window.compare_view()->error().toStdString());
    }
  } else {
    window.start_search();
    window.wait_for_search(600000);
    window.select_plan(0);  // simulates it for the other tabs
  }
  if (options.tab == "whatif") {
    // Twice and four times the nodes, for the picture.
    const planner::SearchInputs current = window.inputs();
    for (int factor : {1, 2, 4}) {
      window.set_what_if(current.nodes * factor, 50, current.global_batch);
      window.wait_for_what_if(600000);
    }
  } else if (options.tab != "plans" && options.tab != "compare") {
    window.wait_for_simulation(600000);
    if (!window.simulation_error().isEmpty()) throw Error(window.simulation_error().toStdString());
  }
  window.show_tab(QString::fromStdString(options.tab));
  window.show();
  QApplication::processEvents();
  if (!capture(window).save(QString::fromStdString(options.screenshot))) {
    throw Error(fmt::format("--screenshot: {}: cannot write", options.screenshot));
  }
  std::printf("wrote %s (tab %s, %s)\n", options.screenshot.c_str(), options.tab.c_str(),
              QGuiApplication::platformName().toStdString().c_str());
  return 0;
}

}  // namespace tessel::gui
