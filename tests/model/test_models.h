// Tiny model configs of each supported family, for tests.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "flywheel/model/decoder.h"
#include "flywheel/model/model_config.h"

namespace flywheel::model::testing {

// A 2-layer model of `family` ("qwen2", "qwen3", "qwen3_moe" or "llama") with GQA (4 query heads,
// 2 kv heads) and an explicit head_dim that differs from hidden / heads. qwen3_moe has 3 layers:
// layers 0 and 2 route each token to 2 of 4 experts, layer 1 is dense (mlp_only_layers).
inline ModelConfig tiny_config(const std::string& family) {
  ModelConfig c;
  c.model_type = family;
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000;
  c.max_position_embeddings = 128;
  c.initializer_range = 0.2;  // large enough that attention patterns are not uniform
  c.qkv_bias = family == "qwen2";
  c.qk_norm = family == "qwen3" || family == "qwen3_moe";
  c.tie_word_embeddings = family == "qwen3";
  if (family == "qwen3_moe") {
    c.num_hidden_layers = 3;
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 24;
    c.norm_topk_prob = true;
    c.mlp_only_layers = {1};
  }
  if (family == "llama") {
    c.has_llama3_rope_scaling = true;
    c.rope_scaling.factor = 8;
    c.rope_scaling.original_max_position_embeddings = 32;
  }
  c.eos_token_ids = {2};
  return c;
}

// A model of `config` with random weights, norms and biases.
inline std::unique_ptr<DecoderModel> tiny_model(const ModelConfig& config,
                                                at::ScalarType dtype = at::kFloat,
                                                uint64_t seed = 1, int threads = 1) {
  DecoderOptions options;
  options.dtype = dtype;
  options.threads = threads;
  auto model = DecoderModel::create(config, options);
  (*model)->init_random(seed);
  // Random norm weights and biases too, so that a wrong formula cannot hide behind ones/zeros.
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed + 100);
  for (auto& [name, p] : (*model)->named_parameters()) {
    if (name.find("norm") != std::string::npos || name.find("bias") != std::string::npos) {
      at::Tensor noise = at::empty(p.sizes(), at::kFloat);
      noise.normal_(0.0, 0.3, gen);
      const_cast<at::Tensor&>(p).add_(noise.to(p.scalar_type()));
    }
  }
  return std::move(*model);
}

inline std::unique_ptr<DecoderModel> tiny_model(const std::string& family,
                                                at::ScalarType dtype = at::kFloat,
                                                uint64_t seed = 1, int threads = 1) {
  return tiny_model(tiny_config(family), dtype, seed, threads);
}

// LoRA adapters of `lora` on `config` with random values, B included (a fresh adapter's zero B
// would hide a wrong formula), by name.
inline std::map<std::string, at::Tensor> random_adapters(const ModelConfig& config,
                                                         const LoraOptions& lora, uint64_t seed,
                                                         double std = 0.3) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::map<std::string, at::Tensor> out;
  for (const ParamSpec& spec : lora_parameter_specs(config, lora)) {
    out[spec.name] = at::empty(spec.shape, at::kFloat).normal_(0, std, gen);
  }
  return out;
}

// `base`'s parameters plus `extra` (adapters), by name, as a load() lookup.
inline DecoderModel::TensorLookup lookup_with(const DecoderModel& base,
                                              const std::map<std::string, at::Tensor>& extra) {
  std::map<std::string, at::Tensor> all = extra;
  for (const auto& [name, p] : base.named_parameters()) all[name] = p;
  return [all](const std::string& name) -> absl::StatusOr<at::Tensor> {
    auto it = all.find(name);
    if (it == all.end()) return absl::NotFoundError(name);
    return it->second;
  };
}

// Two rows of `length` random tokens below `vocab` at positions 0..length-1 (no cache).
inline ForwardBatch random_batch(int64_t vocab, int64_t length, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  ForwardBatch b;
  b.tokens = at::randint(vocab, {2, length}, gen, at::kLong);
  b.positions = at::arange(length, at::kLong).repeat({2, 1});
  return b;
}

}  // namespace flywheel::model::testing
