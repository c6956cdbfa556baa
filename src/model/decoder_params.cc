// The decoder's parameters by Hugging Face name (dense and mixture-of-experts layers), a layer's
// weights looked up by name, Hugging Face's random initialisation, and DecoderModel's parameters:
// creation, loading, initialisation and merged LoRA adapters.
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/cpu/small_gemm.h"
#include "flywheel/model/cpu/tensor_arena.h"
#include "flywheel/model/decoder.h"

namespace flywheel::model {
namespace {

// Bytes of packed weights a decoder keeps (DecoderModel::packs_): a quarter of the machine's
// memory, so that a model near the memory's size still loads and runs (its weights past the
// budget packed per call, slower at small batches) where copies of all its weights would not fit.
int64_t packed_weights_budget() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return std::numeric_limits<int64_t>::max();  // unknown
  return static_cast<int64_t>(pages) * page_size / 4;
}

}  // namespace

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

DecoderModel::DecoderModel(const ModelConfig& config, const DecoderOptions& options)
    : config_(config), options_(options) {}

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::create(const ModelConfig& config,
                                                                   const DecoderOptions& options) {
  FLYWHEEL_RETURN_IF_ERROR(config.validate());
  if (options.dtype != at::kFloat && options.dtype != at::kBFloat16 && options.dtype != at::kHalf) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported model dtype ",
                                                   c10::toString(options.dtype),
                                                   "; supported: float32, bfloat16, float16"));
  }
  if (options.dtype == at::kHalf && options.device.is_cpu()) {
    return absl::InvalidArgumentError("float16 models need a GPU; use float32 or bfloat16 on CPU");
  }
  FLYWHEEL_RETURN_IF_ERROR(validate_lora(config, options.lora));
  std::unique_ptr<DecoderModel> model(new DecoderModel(config, options));
  const at::TensorOptions tensor_options =
      at::TensorOptions().dtype(options.dtype).device(options.device);
  std::map<std::string, at::Tensor> by_name;
  std::vector<ParamSpec> specs = decoder_parameter_specs(config);
  for (ParamSpec& spec : lora_parameter_specs(config, options.lora)) specs.push_back(spec);
  // On the CPU all parameters share one block of memory (huge pages: tensor_arena.h).
  std::vector<at::Tensor> zeros;
  if (options.device.is_cpu()) {
    std::vector<std::vector<int64_t>> shapes;
    for (const ParamSpec& spec : specs) shapes.push_back(spec.shape);
    zeros = zeros_in_one_block(shapes, tensor_options);
  } else {
    for (const ParamSpec& spec : specs) zeros.push_back(at::zeros(spec.shape, tensor_options));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    model->parameters_.emplace_back(specs[i].name, zeros[i]);
    by_name[specs[i].name] = zeros[i];
  }
  // Merged adapters: forwards read a merged copy of each adapted projection (and no adapter).
  const bool merged = options.lora.enabled() && options.lora.merged;
  for (const ParamSpec& target : lora_targets(config, options.lora)) {
    if (!merged) break;
    MergedProjection m{at::empty_like(by_name.at(target.name)), by_name.at(target.name),
                       by_name.at(lora_a_name(target.name)), by_name.at(lora_b_name(target.name))};
    by_name.erase(lora_a_name(target.name));
    by_name.erase(lora_b_name(target.name));
    by_name[target.name] = m.merged;
    model->merged_.push_back(std::move(m));
  }
  auto find = [&](const std::string& name) {
    auto it = by_name.find(name);
    return it == by_name.end() ? at::Tensor() : it->second;
  };
  model->embed_ = find("model.embed_tokens.weight");
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    model->layers_.push_back(
        layer_weights(i, find, options.lora.enabled() ? options.lora.scale() : 0));
  }
  model->merge_adapters();
  model->final_norm_ = find("model.norm.weight");
  model->lm_head_ = config.tie_word_embeddings ? model->embed_ : find("lm_head.weight");
  model->inv_freq_ = rope_inverse_frequencies(config).to(options.device);
  if (options.device.is_cpu() && small_gemm_supports(options.dtype)) {
    model->pool_ = std::make_shared<WorkerPool>(
        options.threads > 0 ? options.threads : std::max(1, at::get_num_threads()));
    if (PackedWeights::used_for(options.dtype)) {
      model->packs_ = std::make_unique<PackedWeights>(packed_weights_budget());
    }
  }
  return model;
}

absl::Status DecoderModel::load(const TensorLookup& lookup) {
  std::vector<std::string> missing;
  at::NoGradGuard no_grad;
  for (auto& [name, parameter] : parameters_) {
    absl::StatusOr<at::Tensor> source = lookup(name);
    if (!source.ok()) {
      if (absl::IsNotFound(source.status())) {
        // A base model's checkpoint holds no adapters: they keep their values.
        if (!is_lora_name(name)) missing.push_back(name);
        continue;
      }
      return source.status();
    }
    if (source->sizes() != parameter.sizes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has shape [", absl::StrJoin(source->sizes(), ", "),
                       "] but the config needs [", absl::StrJoin(parameter.sizes(), ", "), "]"));
    }
    parameter.copy_(*source);
  }
  merge_adapters();
  if (!missing.empty()) {
    if (missing.size() > 5) {
      size_t more = missing.size() - 5;
      missing.resize(5);
      missing.push_back(absl::StrCat("and ", more, " more"));
    }
    return absl::NotFoundError(
        absl::StrCat("checkpoint lacks tensors: ", absl::StrJoin(missing, ", ")));
  }
  return absl::OkStatus();
}

void DecoderModel::init_random(uint64_t seed) {
  std::vector<ParamSpec> specs;
  std::vector<at::Tensor*> targets;
  at::NoGradGuard no_grad;
  for (auto& [name, parameter] : parameters_) {
    if (is_lora_name(name)) {
      parameter.zero_();
      continue;
    }
    specs.push_back(
        {name, std::vector<int64_t>(parameter.sizes().begin(), parameter.sizes().end())});
    targets.push_back(&parameter);
  }
  size_t i = 0;
  random_parameters(specs, config_.initializer_range, seed,
                    [&](const ParamSpec&, const at::Tensor& values) {
                      at::NoGradGuard no_grad;
                      targets[i++]->copy_(values);
                    });
  merge_adapters();
}

void DecoderModel::merge_adapters() {
  at::NoGradGuard no_grad;
  const double scale = options_.lora.scale();
  for (MergedProjection& m : merged_) {
    if (m.merged.scalar_type() == at::kFloat) {  // one GEMM writing the merged weight in place
      at::addmm_out(m.merged, m.base, m.b, m.a, /*beta=*/1.0, /*alpha=*/scale);
    } else {
      m.merged.copy_(merge_lora(m.base, m.a, m.b, scale));
    }
  }
}

void DecoderModel::pack_weights() const {
  if (packs_ == nullptr) return;
  // What project() hands small_linear: contiguous weights (past the budget panels() packs none).
  auto pack = [&](const at::Tensor& w) {
    if (w.defined() && w.is_contiguous()) packs_->panels(w);
  };
  for (const DecoderLayerWeights& l : layers_) {
    for (const at::Tensor* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.router}) {
      pack(*w);
    }
    for (const ExpertWeights& e : l.experts) {
      pack(e.gate);
      pack(e.up);
      pack(e.down);
    }
  }
  pack(lm_head_);
}

absl::StatusOr<std::unique_ptr<KvCache>> DecoderModel::make_cache(int64_t slots,
                                                                  int64_t max_len) const {
  return KvCache::create(config_, slots, max_len,
                         at::TensorOptions().dtype(options_.dtype).device(options_.device));
}

}  // namespace flywheel::model
