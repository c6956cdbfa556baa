// LoRA adapters (Hu et al. 2021, PEFT's layout): a targeted projection W [out, in] gains
// W + (alpha / rank) * B A, with A [rank, in] and B [out, rank]. Adapter tensors are named after
// their projection as PEFT names them inside the model: "<module>.lora_A.weight" and
// "<module>.lora_B.weight", e.g. "model.layers.0.self_attn.q_proj.lora_A.weight".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "flywheel/model/model_config.h"
#include "flywheel/model/param_spec.h"

namespace flywheel::core {
struct LoraTrainingOptions;  // trainer_options.h
}  // namespace flywheel::core

namespace flywheel::model {

struct LoraOptions {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 16;
  // Projection names (lora_target_modules()); a layer's projection is adapted when its module
  // name is listed.
  std::vector<std::string> targets;
  // Inference: true runs W + scale * B A, merged once per set of weights (DecoderModel::
  // merge_adapters); false runs x W^T + scale * (x A^T) B^T in every forward.
  bool merged = true;

  // trainer.lora's rank, alpha, targets and merge_in_engine.
  static LoraOptions from_config(const core::LoraTrainingOptions& lora);

  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / static_cast<double>(rank); }
};

// The projections LoRA can adapt: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj.
const std::vector<std::string>& lora_target_modules();

// InvalidArgument naming what is wrong: rank < 0, alpha <= 0, no or unknown targets, a rank
// larger than a target's smaller side, or MLP targets on a mixture-of-experts layer (adapters on
// experts are not implemented). OK when rank is 0.
absl::Status validate_lora(const ModelConfig& config, const LoraOptions& lora);

// "<module>.lora_A.weight" / "<module>.lora_B.weight" of a projection's "<module>.weight".
std::string lora_a_name(const std::string& weight_name);
std::string lora_b_name(const std::string& weight_name);
// Whether `name` is an adapter tensor's ("*.lora_A.weight" or "*.lora_B.weight").
bool is_lora_name(const std::string& name);

// The weight names of the targeted projections, in layer order ("model.layers.<i>.self_attn.
// q_proj.weight", ...).
std::vector<ParamSpec> lora_targets(const ModelConfig& config, const LoraOptions& lora);
// Every adapter tensor, in layer order: per target, A [rank, in] then B [out, rank].
std::vector<ParamSpec> lora_parameter_specs(const ModelConfig& config, const LoraOptions& lora);

// W + scale * B A, computed in float32 and returned in w's dtype and device.
at::Tensor merge_lora(const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, double scale);

// PEFT's initialisation of a fresh adapter: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_
// with a = sqrt(5)), B = 0, so the adapted model starts equal to the base. Drawn in float32 from
// one generator seeded with `seed`, in lora_parameter_specs' order.
void lora_initial_values(const std::vector<ParamSpec>& specs, uint64_t seed,
                         const std::function<void(const ParamSpec&, const at::Tensor&)>& sink);

}  // namespace flywheel::model
