#include "tessel/gui/child_simulation.hpp"

#include <QApplication>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QProcess>

#include "tessel/core/error.hpp"
#include "tessel/core/json_fields.hpp"

namespace tessel::gui {

ChildSimulation::ChildSimulation(QObject* parent) : QObject(parent) {
  if (QFileInfo(QCoreApplication::applicationFilePath()).fileName() == "tessel") {
    binary_ = QCoreApplication::applicationFilePath();
  }
}

ChildSimulation::~ChildSimulation() { stop(); }

void ChildSimulation::stop() {
  if (process_ == nullptr) return;
  process_->disconnect(this);
  if (process_->state() != QProcess::NotRunning) {
    process_->kill();
    process_->waitForFinished(5000);
  }
  delete process_;
  process_ = nullptr;
}

bool ChildSimulation::start(const Plan& plan, const std::string& db) {
  stop();
  error_.clear();
  if (binary_.isEmpty()) {
    error_ = "simulate: no tessel binary to run (start the window with tessel gui)";
    return false;
  }
  if (!scratch_.isValid()) {
    error_ = "simulate: cannot create a scratch folder: " + scratch_.errorString();
    return false;
  }
  const QString plan_file = scratch_.filePath("plan.json");
  try {
    write_text_file_atomically(plan_file.toStdString(), plan.to_json().dump(1) + "\n");
  } catch (const Error& error) {
    error_ = QString::fromUtf8(error.what());
    return false;
  }
  QStringList args{"simulate", "--plan", plan_file, "--json", "--trace", trace_file(), "--progress"};
  if (!db.empty()) args << "--db" << QString::fromStdString(db);
  process_ = new QProcess(this);
  stderr_.clear();
  error_lines_.clear();
  connect(process_, &QProcess::readyReadStandardError, this, &ChildSimulation::read_stderr);
  connect(process_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
    read_stderr();
    if (code != 0 || status != QProcess::NormalExit) {
      error_ = (error_lines_ + QString::fromUtf8(stderr_)).trimmed();
      if (error_.isEmpty()) error_ = QString("simulate: the child exited with status %1").arg(code);
      emit finished(false, {});
      return;
    }
    emit finished(true, process_->readAllStandardOutput());
  });
  connect(process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    error_ = "simulate: cannot start " + binary_ + ": " + process_->errorString();
    emit finished(false, {});
  });
  process_->start(binary_, args);
  return true;
}

void ChildSimulation::read_stderr() {
  if (process_ == nullptr) return;
  stderr_ += process_->readAllStandardError();
  for (qsizetype newline = stderr_.indexOf('\n'); newline >= 0; newline = stderr_.indexOf('\n')) {
    const QString line = QString::fromUtf8(stderr_.left(newline)).trimmed();
    stderr_.remove(0, newline + 1);
    const QString prefix = "simulate: ";
    const qsizetype percent = line.indexOf('%');
    bool number = false;
    const double share = percent > 0 ? line.mid(prefix.size(), percent - prefix.size()).toDouble(&number) / 100 : 0;
    if (line.startsWith(prefix) && number) emit progress(share, line.mid(prefix.size()));
    else error_lines_ += line + "\n";
  }
}

bool ChildSimulation::running() const { return process_ != nullptr && process_->state() != QProcess::NotRunning; }

bool ChildSimulation::wait(int timeout_ms) {
  QElapsedTimer timer;
  timer.start();
  while (running() && timer.elapsed() < timeout_ms) QApplication::processEvents(QEventLoop::AllEvents, 50);
  QApplication::processEvents();
  return !running();
}

}  // namespace tessel::gui
