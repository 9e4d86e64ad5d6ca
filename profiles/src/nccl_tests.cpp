#include "tessel/profiles/nccl_tests.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::profiles {

std::optional<Collective> collective_from_name(const std::string& raw) {
  std::string name;
  for (char c : raw) {
    if (std::isalnum(static_cast<unsigned char>(c))) name += char(std::tolower(static_cast<unsigned char>(c)));
  }
  // nccl-tests binaries (all_reduce_perf), rccl-tests names (AllReduce) and tessel's.
  static const std::pair<const char*, Collective> kNames[] = {
      {"allreduce", Collective::all_reduce}, {"allgather", Collective::all_gather},
      {"reducescatter", Collective::reduce_scatter}, {"broadcast", Collective::broadcast},
      {"alltoall", Collective::all_to_all}, {"sendrecv", Collective::send_recv},
      {"reduce", Collective::reduce}};
  for (auto [key, op] : kNames) {
    if (name.rfind(key, 0) == 0) return op;
  }
  return std::nullopt;
}

namespace {
LinkSample make_sample(const NcclImportOptions& options, Collective op, int ranks, double bytes, double microseconds) {
  LinkSample s;
  s.fabric = options.fabric;
  s.collective = op;
  s.ranks = ranks;
  s.bytes = bytes;
  s.seconds = microseconds * 1e-6;
  s.source = SampleSource::measured;
  s.tool_version = "nccl-tests";
  return s;
}

std::vector<LinkSample> import_json(const Json& json, const std::string& origin, const NcclImportOptions& options,
                                    std::vector<LinkSample> out) {
  auto need_collective = [&]() -> Collective {
    if (!options.collective) throw Error(fmt::format("{}: the file does not name its collective; pass --collective", origin));
    return *options.collective;
  };
  if (json.is_object() && json.contains("benchmark")) {
    if (options.ranks <= 0) throw Error(fmt::format("{}: the file does not give its rank count; pass --ranks", origin));
    const Collective op = need_collective();
    for (const Json& entry : json["benchmark"]) {
      for (auto it = entry.begin(); it != entry.end(); ++it) {
        const double bytes = std::stod(it.key());
        const Json& row = it.value();
        if (!row.contains("oop_time")) throw Error(fmt::format("{}: size {} has no oop_time", origin, it.key()));
        out.push_back(make_sample(options, op, options.ranks, bytes, row["oop_time"].get<double>()));
      }
    }
    return out;
  }
  if (json.is_object() && json.contains("size") && json.contains("time")) {
    if (json.value("inPlace", 0) != 0) return out;  // out-of-place rows only
    std::optional<Collective> op = json.contains("name") ? collective_from_name(json["name"].get<std::string>())
                                                         : options.collective;
    if (!op) op = need_collective();
    const int ranks = options.ranks > 0 ? options.ranks : json.value("gpus", 0);
    if (ranks <= 0) throw Error(fmt::format("{}: a record has no gpus count; pass --ranks", origin));
    out.push_back(make_sample(options, *op, ranks, json["size"].get<double>(), json["time"].get<double>()));
    return out;
  }
  throw Error(fmt::format("{}: JSON is neither nccl-tests structured output nor size/time records", origin));
}
}  // namespace

std::vector<LinkSample> import_nccl_tests(const std::string& text, const std::string& origin,
                                          const NcclImportOptions& options) {
  if (options.fabric.empty()) throw Error("--fabric: required (e.g. dgx-h100/intra)");
  std::vector<LinkSample> samples;
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '[')) {
    // One JSON document, or one record per line.
    if (Json::accept(text)) {
      // Parsed through the guarded reader: keys twice and deep nesting are refused.
      const Json whole = parse_json_text(text, origin);
      if (whole.is_array()) {
        for (const Json& record : whole) samples = import_json(record, origin, options, std::move(samples));
      } else {
        samples = import_json(whole, origin, options, std::move(samples));
      }
      return samples;
    } else {
      std::istringstream lines(text);
      int number = 0;
      for (std::string line; std::getline(lines, line);) {
        ++number;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        samples = import_json(parse_json_text(line, fmt::format("{}:{}", origin, number)),
                              fmt::format("{}:{}", origin, number), options, std::move(samples));
      }
      return samples;
    }
  }
  // Text table.
  std::optional<Collective> op = options.collective;
  int ranks_in_header = 0;
  std::istringstream lines(text);
  int number = 0;
  std::vector<std::pair<int, std::vector<std::string>>> rows;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (!op) {
      for (const char* name : {"all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "broadcast_perf",
                               "alltoall_perf", "sendrecv_perf", "reduce_perf"}) {
        // all_reduce_perf contains reduce_perf: the first (longest) match wins.
        if (line.find(name) != std::string::npos) {
          op = collective_from_name(name);
          break;
        }
      }
    }
    std::istringstream words(line);
    std::vector<std::string> tokens;
    for (std::string word; words >> word;) tokens.push_back(word);
    if (tokens.size() >= 2 && tokens[0] == "#" && tokens[1] == "Rank") ++ranks_in_header;
    if (tokens.empty() || !std::isdigit(static_cast<unsigned char>(tokens[0][0]))) continue;
    rows.emplace_back(number, std::move(tokens));
  }
  if (!op) throw Error(fmt::format("{}: cannot tell which collective this is; pass --collective", origin));
  const int ranks = options.ranks > 0 ? options.ranks : ranks_in_header;
  if (ranks <= 0) throw Error(fmt::format("{}: no '#  Rank' lines to count ranks from; pass --ranks", origin));
  for (const auto& [line, tokens] : rows) {
    // size count type [redop] [root] then (time algbw busbw #wrong) out-of-place and in-place.
    if (tokens.size() < 11) throw Error(fmt::format("{}:{}: expected an nccl-tests result row", origin, line));
    try {
      samples.push_back(make_sample(options, *op, ranks, std::stod(tokens[0]), std::stod(tokens[tokens.size() - 8])));
    } catch (const std::exception&) {
      throw Error(fmt::format("{}:{}: expected numbers for size and time", origin, line));
    }
  }
  if (samples.empty()) throw Error(fmt::format("{}: no result rows found", origin));
  return samples;
}

}  // namespace tessel::profiles
