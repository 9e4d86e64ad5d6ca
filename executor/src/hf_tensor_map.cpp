// hf_tensor_map.hpp. A tensor that Hugging Face stores whole and untransposed is written
// straight from the whole model; a slice or a transpose is copied out first (an export
// holds at most one model's worth of such copies, which is fine for a one-off command).
#include "tessel/executor/hf_tensor_map.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "tessel/core/error.hpp"
#include "tessel/core/json_fields.hpp"
#include "tessel/executor/stage_weights.hpp"

namespace tessel::executor {

namespace {
// [begin, end) of `columns` in a tessel tensor `cols` wide.
std::pair<int, int> column_range(const ModelSpec& model, HfColumns columns, int cols) {
  const int q = model.hidden, kv = model.kv_dim();
  switch (columns) {
    case HfColumns::all:
      return {0, cols};
    case HfColumns::q:
      return {0, q};
    case HfColumns::k:
      return {q, q + kv};
    case HfColumns::v:
      return {q + kv, q + 2 * kv};
    case HfColumns::gate:  // SwiGLU's fc1 halves (an expert's of its own width)
      return {0, cols / 2};
    case HfColumns::up:
      return {cols / 2, cols};
  }
  return {0, cols};
}

// `tessel_name` without its "L{l}." prefix, and the layer (-1 for top-level tensors).
std::pair<std::string, int> role_of(const std::string& tessel_name) {
  const std::size_t dot = tessel_name.find('.');
  if (tessel_name.size() < 2 || tessel_name[0] != 'L' || dot == std::string::npos ||
      !std::all_of(tessel_name.begin() + 1, tessel_name.begin() + long(dot),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return {tessel_name, -1};
  }
  return {tessel_name.substr(dot + 1), std::stoi(tessel_name.substr(1, dot - 1))};
}

// The values of `t` as Hugging Face stores them.
std::vector<float> hf_values(const HfTensor& t, const std::vector<float>& whole) {
  const int width = t.col_end - t.col_begin;
  std::vector<float> out(t.size());
  for (int r = 0; r < t.rows; ++r) {
    const float* row = whole.data() + t.offset + std::size_t(r) * std::size_t(t.cols) + std::size_t(t.col_begin);
    for (int c = 0; c < width; ++c) {
      out[t.transposed ? std::size_t(c) * std::size_t(t.rows) + std::size_t(r)
                       : std::size_t(r) * std::size_t(width) + std::size_t(c)] = row[c];
    }
  }
  return out;
}

// The inverse of hf_values: `values` (Hugging Face's layout) into the whole model.
void place_hf_values(const HfTensor& t, const std::vector<float>& values, std::vector<float>& whole) {
  const int width = t.col_end - t.col_begin;
  for (int r = 0; r < t.rows; ++r) {
    float* row = whole.data() + t.offset + std::size_t(r) * std::size_t(t.cols) + std::size_t(t.col_begin);
    for (int c = 0; c < width; ++c) {
      row[c] = values[t.transposed ? std::size_t(c) * std::size_t(t.rows) + std::size_t(r)
                                   : std::size_t(r) * std::size_t(width) + std::size_t(c)];
    }
  }
}
}  // namespace

std::vector<HfTensor> hf_tensors_by_rules(const ModelSpec& model, const std::vector<HfNameRule>& rules) {
  std::vector<HfTensor> out;
  for (const TensorSlot& slot : whole_model_tensors(model)) {
    const auto [role, layer] = role_of(slot.name);
    bool found = false;
    for (const HfNameRule& rule : rules) {
      if (rule.tessel_role != role) continue;
      found = true;
      HfTensor t;
      t.hf_name = layer < 0 ? rule.hf_name : fmt::format(fmt::runtime(rule.hf_name), layer);
      t.tessel_name = slot.name;
      t.offset = slot.offset;
      t.rows = slot.rows;
      t.cols = slot.cols;
      std::tie(t.col_begin, t.col_end) = column_range(model, rule.columns, slot.cols);
      t.transposed = rule.transposed;
      const std::int64_t width = t.col_end - t.col_begin;
      if (slot.rows == 1) {
        t.shape = {width};
      } else {
        t.shape =
            rule.transposed ? std::vector<std::int64_t>{width, slot.rows} : std::vector<std::int64_t>{slot.rows, width};
      }
      out.push_back(std::move(t));
    }
    if (!found) throw Error(fmt::format("internal: no Hugging Face name for tensor {}", slot.name));
  }
  return out;
}

std::size_t whole_model_size(const ModelSpec& model) {
  const std::vector<TensorSlot> tensors = whole_model_tensors(model);
  return tensors.back().offset + tensors.back().size();
}

void write_hf_model(const std::string& safetensors_path, const std::vector<HfTensor>& tensors,
                    const std::vector<float>& whole, SafetensorsDType dtype,
                    std::map<std::string, std::string> metadata, const std::string& config_json) {
  std::vector<std::vector<float>> copies;  // sliced or transposed tensors
  copies.reserve(tensors.size());
  std::vector<SafetensorsOutput> outputs;
  for (const HfTensor& t : tensors) {
    if (t.offset + std::size_t(t.rows) * std::size_t(t.cols) > whole.size()) {
      throw Error("internal: the whole model is shorter than its tensors");
    }
    const bool as_stored = !t.transposed && t.col_begin == 0 && t.col_end == t.cols;
    if (as_stored) {
      outputs.push_back({t.hf_name, t.shape, whole.data() + t.offset});
    } else {
      copies.push_back(hf_values(t, whole));
      outputs.push_back({t.hf_name, t.shape, copies.back().data()});
    }
  }
  metadata["format"] = "pt";  // what transformers expects of a PyTorch model's file
  write_safetensors(safetensors_path, outputs, dtype, metadata);
  const auto folder = std::filesystem::absolute(safetensors_path).parent_path();
  write_text_file_atomically((folder / "config.json").string(), config_json);
}

std::vector<float> read_hf_model(const SafetensorsFile& file, const std::vector<HfTensor>& tensors,
                                 std::size_t whole_size, std::map<std::string, std::string> stored_as,
                                 const ModelSpec& model, const std::set<std::string>* needed) {
  auto fail = [&](const std::string& tensor, const std::string& what) {
    return Error(fmt::format("--init: {}: tensor {}: {}", file.path(), tensor, what));
  };
  std::vector<float> whole(whole_size);
  for (const HfTensor& t : tensors) {
    const auto found = stored_as.find(t.hf_name);
    if (found == stored_as.end()) {
      throw fail(t.hf_name, fmt::format("missing (the plan's model {} has {} layers, hidden {})", model.name,
                                        model.layers, model.hidden));
    }
    const SafetensorsFile::Entry& e = file.entries().at(found->second);
    if (e.shape != t.shape) {
      throw fail(found->second, fmt::format("shape {} differs from the plan's model {}: {}", Json(e.shape).dump(),
                                            model.name, Json(t.shape).dump()));
    }
    if (e.dtype != "F32" && e.dtype != "BF16") {
      throw fail(found->second, fmt::format("dtype {}; F32 or BF16 is read", e.dtype));
    }
    if (!needed || needed->count(t.tessel_name)) place_hf_values(t, file.values(found->second), whole);
    stored_as.erase(found);
  }
  if (!stored_as.empty()) {
    throw fail(stored_as.begin()->second, fmt::format("not in the plan's model {} ({} layers, vocabulary {})",
                                                      model.name, model.layers, model.vocab));
  }
  return whole;
}

}  // namespace tessel::executor
