// Peak memory per rank and category, predicted against measured, as the compare tab draws it,
// read from `tessel compare --json`'s "memory" object (fields: docs/MEMORY.md) by one adapter, so
// the tab depends on a file format rather than on executor or planner classes; a compare without
// "memory" shows why instead of a chart.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/core/json_fields.hpp"

namespace tessel::gui {

struct CategoryBytes {
  std::string category;  // "parameters", ..., "workspace", and last "total" (the peak of the sum)
  double predicted_bytes = 0;
  std::optional<double> measured_bytes;  // none: not measured
};

struct RankMemory {
  int rank = 0, stage = 0;
  std::vector<CategoryBytes> categories;  // the categories in compare's order, then "total"
  double measured_total_bytes() const;    // 0 when not measured
};

struct MemoryByRank {
  std::vector<RankMemory> ranks;  // by rank
  std::string missing;            // why there is nothing to draw; empty when ranks are there
};

// `compare`: the whole JSON `tessel compare --json` wrote. Throws nothing: a missing or
// malformed "memory" object comes back as `missing`, naming the field.
MemoryByRank memory_by_rank_from_compare_json(const Json& compare);

// The ranks a chart has room for: all of them up to `most`, else the `most` with the
// largest measured (else predicted) total, in rank order.
std::vector<RankMemory> ranks_to_draw(const MemoryByRank& memory, std::size_t most);

}  // namespace tessel::gui
