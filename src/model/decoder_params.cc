// The decoder's parameters by Hugging Face name (dense and mixture-of-experts layers), a layer's
// weights looked up by name, and Hugging Face's random initialisation.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"
#include "flywheel/model/decoder.h"

namespace flywheel::model {

std::vector<ParamSpec> decoder_parameter_specs(const ModelConfig& c) {
  const int64_t h = c.hidden_size, hd = c.head_dim;
  const int64_t q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
  std::vector<ParamSpec> specs = {{"model.embed_tokens.weight", {c.vocab_size, h}}};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    specs.push_back({p + "input_layernorm.weight", {h}});
    specs.push_back({p + "self_attn.q_proj.weight", {q, h}});
    if (c.qkv_bias) specs.push_back({p + "self_attn.q_proj.bias", {q}});
    specs.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    if (c.qkv_bias) specs.push_back({p + "self_attn.k_proj.bias", {kv}});
    specs.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    if (c.qkv_bias) specs.push_back({p + "self_attn.v_proj.bias", {kv}});
    specs.push_back({p + "self_attn.o_proj.weight", {h, q}});
    if (c.o_bias) specs.push_back({p + "self_attn.o_proj.bias", {h}});
    if (c.qk_norm) {
      specs.push_back({p + "self_attn.q_norm.weight", {hd}});
      specs.push_back({p + "self_attn.k_norm.weight", {hd}});
    }
    specs.push_back({p + "post_attention_layernorm.weight", {h}});
    if (c.is_moe_layer(i)) {
      const int64_t mi = c.moe_intermediate_size;
      specs.push_back({p + "mlp.gate.weight", {c.num_experts, h}});
      for (int64_t e = 0; e < c.num_experts; ++e) {
        const std::string x = absl::StrCat(p, "mlp.experts.", e, ".");
        specs.push_back({x + "gate_proj.weight", {mi, h}});
        specs.push_back({x + "up_proj.weight", {mi, h}});
        specs.push_back({x + "down_proj.weight", {h, mi}});
      }
      continue;
    }
    specs.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, h}});
    specs.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, h}});
    specs.push_back({p + "mlp.down_proj.weight", {h, c.intermediate_size}});
  }
  specs.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, h}});
  return specs;
}

DecoderLayerWeights layer_weights(int64_t layer,
                                  const std::function<at::Tensor(const std::string&)>& find,
                                  double lora_scale) {
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  DecoderLayerWeights w;
  w.layer = layer;
  w.input_norm = find(p + "input_layernorm.weight");
  w.q = find(p + "self_attn.q_proj.weight");
  w.q_bias = find(p + "self_attn.q_proj.bias");
  w.k = find(p + "self_attn.k_proj.weight");
  w.k_bias = find(p + "self_attn.k_proj.bias");
  w.v = find(p + "self_attn.v_proj.weight");
  w.v_bias = find(p + "self_attn.v_proj.bias");
  w.o = find(p + "self_attn.o_proj.weight");
  w.o_bias = find(p + "self_attn.o_proj.bias");
  w.q_norm = find(p + "self_attn.q_norm.weight");
  w.k_norm = find(p + "self_attn.k_norm.weight");
  w.post_norm = find(p + "post_attention_layernorm.weight");
  w.gate = find(p + "mlp.gate_proj.weight");
  w.up = find(p + "mlp.up_proj.weight");
  w.down = find(p + "mlp.down_proj.weight");
  w.router = find(p + "mlp.gate.weight");
  for (int64_t e = 0; w.router.defined(); ++e) {
    const std::string x = absl::StrCat(p, "mlp.experts.", e, ".");
    ExpertWeights expert{find(x + "gate_proj.weight"), find(x + "up_proj.weight"),
                         find(x + "down_proj.weight")};
    if (!expert.gate.defined()) break;
    w.experts.push_back(std::move(expert));
  }
  auto adapter = [&](const std::string& module) {
    const std::string weight = p + module + ".weight";
    return LoraAdapter{find(lora_a_name(weight)), find(lora_b_name(weight))};
  };
  w.q_lora = adapter("self_attn.q_proj");
  w.k_lora = adapter("self_attn.k_proj");
  w.v_lora = adapter("self_attn.v_proj");
  w.o_lora = adapter("self_attn.o_proj");
  w.gate_lora = adapter("mlp.gate_proj");
  w.up_lora = adapter("mlp.up_proj");
  w.down_lora = adapter("mlp.down_proj");
  w.lora_scale = lora_scale;
  return w;
}

void random_parameters(const std::vector<ParamSpec>& specs, double initializer_range, uint64_t seed,
                       const std::function<void(const ParamSpec&, const at::Tensor&)>& sink) {
  at::NoGradGuard no_grad;
  at::Generator generator = at::detail::createCPUGenerator(seed);
  for (const ParamSpec& spec : specs) {
    const std::string& name = spec.name;
    const bool is_norm = name.find("norm.weight") != std::string::npos;
    const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    at::Tensor values = at::empty(spec.shape, at::kFloat);
    if (is_norm) {
      values.fill_(1.0);
    } else if (is_bias) {
      values.zero_();
    } else {
      values.normal_(0.0, initializer_range, generator);
    }
    sink(spec, values);
  }
}

}  // namespace flywheel::model
