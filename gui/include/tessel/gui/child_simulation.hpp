// A plan simulated in a child `tessel simulate --json --trace --progress`: SimGrid runs
// one engine per process, so the window never simulates in its own process; the child
// also keeps a long simulation off the UI thread, says how far it is (its progress lines
// on stderr), and can be killed when the user picks another plan.
#pragma once

#include <QObject>
#include <QString>
#include <QTemporaryDir>

#include "tessel/core/plan.hpp"

class QProcess;

namespace tessel::gui {

class ChildSimulation : public QObject {
  Q_OBJECT
 public:
  // The binary defaults to this program when it is `tessel`.
  explicit ChildSimulation(QObject* parent = nullptr);
  ~ChildSimulation() override;
  void set_binary(const QString& path) { binary_ = path; }
  bool has_binary() const { return !binary_.isEmpty(); }

  // Writes the plan to a scratch file and starts the child (stopping one still running);
  // `db` empty: the child's default profiles database. False, with error(), when it
  // cannot start.
  bool start(const Plan& plan, const std::string& db);
  bool running() const;
  // Runs the event loop until the child ends or `timeout_ms` passes; true if it ended.
  bool wait(int timeout_ms);
  // The child's error line (its stderr) after a failure.
  const QString& error() const { return error_; }
  // The trace of the last finished simulation.
  QString trace_file() const { return scratch_.filePath("trace.json"); }

 signals:
  // json: the child's `--json` output (valid when ok).
  void finished(bool ok, const QByteArray& json);
  // The child's latest progress: the share of ops replayed and its line ("42% of the
  // ops in 12.3 s, about 17 s left").
  void progress(double fraction, const QString& line);

 private:
  void stop();
  void read_stderr();
  QProcess* process_ = nullptr;
  QTemporaryDir scratch_;
  QString binary_, error_;
  QByteArray stderr_;    // read but not yet a whole line
  QString error_lines_;  // the child's stderr lines that are not progress
};

}  // namespace tessel::gui
