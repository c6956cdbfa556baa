#include "flywheel/model/lora.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/core/options/trainer_options.h"
#include "flywheel/model/decoder.h"

namespace flywheel::model {
namespace {

constexpr const char* kWeightSuffix = ".weight";

std::string module_of(const std::string& weight_name) {
  const size_t n = std::string(kWeightSuffix).size();
  return weight_name.size() > n ? weight_name.substr(0, weight_name.size() - n) : weight_name;
}

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() > end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

bool is_mlp_module(const std::string& module) {
  return module == "gate_proj" || module == "up_proj" || module == "down_proj";
}

}  // namespace

LoraOptions LoraOptions::from_config(const core::LoraTrainingOptions& lora) {
  LoraOptions o;
  o.rank = lora.rank;
  o.alpha = lora.alpha;
  o.targets = lora.targets;
  o.merged = lora.merge_in_engine;
  return o;
}

const std::vector<std::string>& lora_target_modules() {
  static const std::vector<std::string> kModules = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                    "gate_proj", "up_proj", "down_proj"};
  return kModules;
}

std::string lora_a_name(const std::string& weight_name) {
  return module_of(weight_name) + ".lora_A.weight";
}

std::string lora_b_name(const std::string& weight_name) {
  return module_of(weight_name) + ".lora_B.weight";
}

bool is_lora_name(const std::string& name) {
  return ends_with(name, ".lora_A.weight") || ends_with(name, ".lora_B.weight");
}

absl::Status validate_lora(const ModelConfig& config, const LoraOptions& lora) {
  if (lora.rank < 0) return absl::InvalidArgumentError("lora.rank: must be >= 0 (0 = off)");
  if (!lora.enabled()) return absl::OkStatus();
  if (!(lora.alpha > 0)) return absl::InvalidArgumentError("lora.alpha: must be > 0");
  if (lora.targets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("lora.targets: name at least one of ",
                                                   absl::StrJoin(lora_target_modules(), ", ")));
  }
  const std::vector<std::string>& known = lora_target_modules();
  for (const std::string& t : lora.targets) {
    if (std::find(known.begin(), known.end(), t) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat("lora.targets: unknown projection '", t,
                                                     "'; known: ", absl::StrJoin(known, ", ")));
    }
    if (is_mlp_module(t) && config.num_moe_layers() > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lora.targets: '", t,
          "' on a mixture-of-experts model (adapters on experts are not "
          "implemented); adapt the attention projections (q_proj, k_proj, v_proj, o_proj)"));
    }
  }
  for (const ParamSpec& spec : lora_targets(config, lora)) {
    if (lora.rank > std::min(spec.shape[0], spec.shape[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("lora.rank: ", lora.rank, " is larger than ", spec.name, " [",
                       absl::StrJoin(spec.shape, ", "), "] (rank <= its smaller side)"));
    }
  }
  return absl::OkStatus();
}

std::vector<ParamSpec> lora_targets(const ModelConfig& config, const LoraOptions& lora) {
  std::vector<ParamSpec> out;
  if (!lora.enabled()) return out;
  // The decoder's own projection weights ("model.layers.<i>.{self_attn,mlp}.<module>.weight"),
  // experts' left out.
  for (const ParamSpec& spec : decoder_parameter_specs(config)) {
    const std::string& name = spec.name;
    if (!ends_with(name, ".weight") || name.find(".experts.") != std::string::npos) continue;
    const std::string module = module_of(name);
    const std::string leaf = module.substr(module.rfind('.') + 1);
    if (std::find(lora.targets.begin(), lora.targets.end(), leaf) != lora.targets.end()) {
      out.push_back(spec);
    }
  }
  return out;
}

std::vector<ParamSpec> lora_parameter_specs(const ModelConfig& config, const LoraOptions& lora) {
  std::vector<ParamSpec> specs;
  for (const ParamSpec& target : lora_targets(config, lora)) {
    specs.push_back({lora_a_name(target.name), {lora.rank, target.shape[1]}});
    specs.push_back({lora_b_name(target.name), {target.shape[0], lora.rank}});
  }
  return specs;
}

at::Tensor merge_lora(const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, double scale) {
  at::NoGradGuard no_grad;
  const at::Tensor merged = at::addmm(w.to(at::kFloat), b.to(w.device()).to(at::kFloat),
                                      a.to(w.device()).to(at::kFloat), /*beta=*/1.0,
                                      /*alpha=*/scale);
  return merged.to(w.scalar_type());
}

void lora_initial_values(const std::vector<ParamSpec>& specs, uint64_t seed,
                         const std::function<void(const ParamSpec&, const at::Tensor&)>& sink) {
  at::NoGradGuard no_grad;
  at::Generator generator = at::detail::createCPUGenerator(seed);
  for (const ParamSpec& spec : specs) {
    at::Tensor values = at::zeros(spec.shape, at::kFloat);
    if (ends_with(spec.name, ".lora_A.weight")) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(spec.shape[1]));
      values.uniform_(-bound, bound, generator);
    }
    sink(spec, values);
  }
}

}  // namespace flywheel::model
