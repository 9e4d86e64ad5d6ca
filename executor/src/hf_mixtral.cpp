// hf_mixtral.hpp: LLaMA's name table without the dense MLP, plus the router and one rule
// per expert tensor; the config is LLaMA's with Mixtral's MoE fields.
#include "tessel/executor/hf_mixtral.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/hf_llama.hpp"

namespace tessel::executor {

namespace {
std::vector<HfNameRule> mixtral_rules(const ModelSpec& model) {
  // LLaMA's table less the dense MLP, the router after the second norm (so the rules keep
  // whole_model_tensors order), then one rule per expert tensor.
  std::vector<HfNameRule> rules;
  for (const HfNameRule& rule : llama_name_rules()) {
    if (rule.tessel_role.starts_with("mlp.")) continue;
    rules.push_back(rule);
    if (rule.tessel_role == "ln2.gain") {
      rules.push_back({"moe.router.weight", "model.layers.{}.block_sparse_moe.gate.weight", HfColumns::all, true});
    }
  }
  for (int e = 0; e < model.moe.experts; ++e) {
    // "{{}}" keeps the layer's placeholder for hf_tensors_by_rules.
    const std::string expert = fmt::format("model.layers.{{}}.block_sparse_moe.experts.{}.", e);
    const std::string role = fmt::format("moe.expert{}.", e);
    rules.push_back({role + "fc1.weight", expert + "w1.weight", HfColumns::gate, true});
    rules.push_back({role + "fc1.weight", expert + "w3.weight", HfColumns::up, true});
    rules.push_back({role + "fc2.weight", expert + "w2.weight", HfColumns::all, true});
  }
  return rules;
}

void require_mixtral(const ModelSpec& model) {
  if (!is_mixtral_shaped(model)) throw Error(fmt::format("internal: model {} is not Mixtral-shaped", model.name));
}
}  // namespace

bool is_mixtral_shaped(const ModelSpec& m) {
  return is_llama_shaped(m) && m.moe.enabled() && m.moe.every == 1 && m.moe.shared_experts == 0;
}

std::vector<HfTensor> mixtral_tensors(const ModelSpec& model) {
  return hf_tensors_by_rules(model, mixtral_rules(model));
}

Json mixtral_config(const ModelSpec& m) {
  Json config = llama_config(m);
  for (const char* dense_only : {"mlp_bias", "pretraining_tp", "head_dim"}) config.erase(dense_only);
  config["model_type"] = "mixtral";
  config["architectures"] = Json::array({"MixtralForCausalLM"});
  config["intermediate_size"] = m.moe.expert_ffn_hidden;
  config["num_local_experts"] = m.moe.experts;
  config["num_experts_per_tok"] = m.moe.top_k;
  config["router_aux_loss_coef"] = 0.01;  // TrainerOptions::moe_aux_coefficient's default
  config["output_router_logits"] = false;
  config["router_jitter_noise"] = 0.0;
  config["sliding_window"] = nullptr;
  return config;
}

void write_mixtral_export(const std::string& safetensors_path, const ModelSpec& model, const std::vector<float>& whole,
                          SafetensorsDType dtype, const std::map<std::string, std::string>& metadata) {
  require_mixtral(model);
  Json config = mixtral_config(model);
  if (dtype == SafetensorsDType::bf16) config["torch_dtype"] = "bfloat16";
  write_hf_model(safetensors_path, mixtral_tensors(model), whole, dtype, metadata, config.dump(2) + "\n");
}

std::vector<float> whole_model_from_mixtral(const SafetensorsFile& file, const ModelSpec& model,
                                            const std::set<std::string>* needed) {
  require_mixtral(model);
  std::map<std::string, std::string> stored_as;
  for (const auto& [name, entry] : file.entries()) {
    const std::string buffer = ".rotary_emb.inv_freq";  // recomputed from rope_theta
    if (name.size() >= buffer.size() && name.compare(name.size() - buffer.size(), buffer.size(), buffer) == 0) continue;
    stored_as[name] = name;
  }
  return read_hf_model(file, mixtral_tensors(model), whole_model_size(model), std::move(stored_as), model, needed);
}

}  // namespace tessel::executor
