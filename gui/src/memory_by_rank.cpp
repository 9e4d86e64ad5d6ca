// The compare JSON's "memory" object read into the compare tab's rows. Every field is
// checked for its type before it is read (a file written by another tessel version must
// not crash the window); the first bad field is named in `missing`.
#include "tessel/gui/memory_by_rank.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace tessel::gui {

namespace {
constexpr const char* kNoMemory =
    "no memory measured: this run's `tessel compare --json` has no \"memory\" (the executor records peak memory by "
    "category from issue 16 on; re-run the plan with `tessel run`)";

MemoryByRank nothing_because(std::string why) {
  MemoryByRank out;
  out.missing = std::move(why);
  return out;
}

std::optional<double> number_at(const Json& object, const std::string& key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_number()) return std::nullopt;
  return object[key].get<double>();
}

// One rank's entry, or the name of the field that is wrong.
std::optional<RankMemory> rank_from_json(const Json& entry, const std::vector<std::string>& names, std::string& bad) {
  const auto rank = number_at(entry, "rank");
  if (!rank) {
    bad = "memory.ranks[].rank";
    return std::nullopt;
  }
  RankMemory out;
  out.rank = int(*rank);
  out.stage = int(number_at(entry, "stage").value_or(0));
  const Json predicted = entry.value("predicted_bytes", Json::object());
  const Json measured = entry.value("measured_peak_bytes", Json());
  for (const std::string& name : names) {
    const auto predicted_bytes = number_at(predicted, name);
    if (!predicted_bytes) {
      bad = fmt::format("memory.ranks[rank {}].predicted_bytes.{}", out.rank, name);
      return std::nullopt;
    }
    out.categories.push_back({name, *predicted_bytes, number_at(measured, name)});
  }
  const auto predicted_total = number_at(entry, "predicted_total_bytes");
  if (!predicted_total) {
    bad = fmt::format("memory.ranks[rank {}].predicted_total_bytes", out.rank);
    return std::nullopt;
  }
  out.categories.push_back({"total", *predicted_total, number_at(entry, "measured_total_peak_bytes")});
  // A rank whose ledger recorded nothing measured nothing, rather than zero bytes.
  if (out.measured_total_bytes() <= 0) {
    for (CategoryBytes& c : out.categories) c.measured_bytes.reset();
  }
  return out;
}
}  // namespace

double RankMemory::measured_total_bytes() const {
  return categories.empty() ? 0.0 : categories.back().measured_bytes.value_or(0.0);
}

MemoryByRank memory_by_rank_from_compare_json(const Json& compare) {
  if (!compare.is_object() || !compare.contains("memory")) return nothing_because(kNoMemory);
  const Json& memory = compare["memory"];
  if (!memory.is_object() || !memory.contains("categories") || !memory["categories"].is_array() ||
      !memory.contains("ranks") || !memory["ranks"].is_array()) {
    return nothing_because("memory: expected an object with the arrays \"categories\" and \"ranks\"");
  }
  std::vector<std::string> names;
  for (const Json& name : memory["categories"]) {
    if (!name.is_string()) return nothing_because("memory.categories: expected names (strings)");
    names.push_back(name.get<std::string>());
  }
  MemoryByRank out;
  std::string bad;
  for (const Json& entry : memory["ranks"]) {
    std::optional<RankMemory> rank = rank_from_json(entry, names, bad);
    if (!rank) return nothing_because(bad + ": missing or not a number");
    out.ranks.push_back(std::move(*rank));
  }
  std::sort(out.ranks.begin(), out.ranks.end(),
            [](const RankMemory& a, const RankMemory& b) { return a.rank < b.rank; });
  if (out.ranks.empty()) out.missing = "memory.ranks: empty (no rank recorded its memory)";
  return out;
}

std::vector<RankMemory> ranks_to_draw(const MemoryByRank& memory, std::size_t most) {
  std::vector<RankMemory> ranks = memory.ranks;
  if (ranks.size() <= most) return ranks;
  auto size_of = [](const RankMemory& r) {
    return r.measured_total_bytes() > 0 ? r.measured_total_bytes() : r.categories.back().predicted_bytes;
  };
  std::stable_sort(ranks.begin(), ranks.end(),
                   [&](const RankMemory& a, const RankMemory& b) { return size_of(a) > size_of(b); });
  ranks.resize(most);
  std::sort(ranks.begin(), ranks.end(), [](const RankMemory& a, const RankMemory& b) { return a.rank < b.rank; });
  return ranks;
}

}  // namespace tessel::gui
