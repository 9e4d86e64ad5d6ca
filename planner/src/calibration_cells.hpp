// The cells a calibration weighs its runs by: the rows of one source that train with one
// framework. A cell's runs share what is not hardware (the lab's kernels and settings,
// the framework's overheads), so the fit asks the shared parameters for the shape within
// each cell and, per framework, for the mean level over its cells, which is what a run of
// a new source is predicted at; every cell weighs the same, whatever its row count.
#pragma once

#include <cstddef>
#include <vector>

#include "tessel/planner/calibrate.hpp"

namespace tessel::planner {

class ErrorCells {
 public:
  ErrorCells(const RunSet& runs, const std::vector<std::size_t>& rows);
  std::size_t size() const { return rows_.size(); }
  const std::vector<std::size_t>& rows(std::size_t cell) const { return rows_[cell]; }
  std::size_t source(std::size_t cell) const { return source_[cell]; }
  Framework framework(std::size_t cell) const { return framework_[cell]; }
  // Each cell's mean of ln(predicted / measured).
  std::vector<double> levels(const std::vector<double>& predicted) const;
  // Each cell's level less its framework's mean over cells: the cell's own effect.
  std::vector<double> effects(const std::vector<double>& levels) const;
  // The mean over cells of: the cell's mean loss of (ln error - its level), plus `pooling`
  // times the loss of its level and (1 - pooling) times the loss of its framework's mean
  // level. pooling 0: a cell's own level is its source's effect; 1: none. The loss is
  // about |e| beyond 3%, quadratic within.
  double objective(const std::vector<double>& predicted, double pooling) const;

 private:
  const RunSet& runs_;
  std::vector<std::vector<std::size_t>> rows_;
  std::vector<std::size_t> source_;
  std::vector<Framework> framework_;
};

}  // namespace tessel::planner
