#include "flywheel/model/grow_model.h"

#include <map>

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flywheel/model/param_spec.h"

namespace flywheel::model {
namespace {

// Whether `name` is an output projection of its layer: the attention's o_proj or an MLP's (a
// dense MLP's, an expert's, a shared expert's) down_proj, weight or bias.
bool is_output_projection(const std::string& name) {
  return absl::StrContains(name, ".o_proj.") || absl::StrContains(name, ".down_proj.");
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecoderModel>> grow_model(const DecoderModel& base,
                                                         const GrowOptions& options) {
  if (options.add_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("add_layers must be >= 1, got ", options.add_layers));
  }
  if (base.options().lora.enabled()) {
    return absl::InvalidArgumentError(
        "cannot grow a model with LoRA adapters: merge them first (flywheel export)");
  }
  ModelConfig config = base.config();
  const int64_t base_layers = config.num_hidden_layers;
  config.num_hidden_layers += options.add_layers;
  absl::StatusOr<std::unique_ptr<DecoderModel>> grown =
      DecoderModel::create(config, base.options());
  if (!grown.ok()) return grown.status();
  (*grown)->init_random(options.seed);

  std::map<std::string, at::Tensor> held;
  for (const auto& [name, tensor] : base.named_parameters()) held.emplace(name, tensor);
  at::NoGradGuard no_grad;
  for (const auto& [name, tensor] : (*grown)->named_parameters()) {
    const int64_t layer = layer_index(name);
    if (layer >= base_layers) {
      if (is_output_projection(name)) tensor.zero_();
      continue;
    }
    auto it = held.find(name);
    if (it == held.end() || !it->second.sizes().equals(tensor.sizes())) {
      // The same config gives the same parameters: a mismatch is a bug in the decoder.
      return absl::InternalError(
          absl::StrCat("the grown model's ", name, " has no counterpart of its shape in the base"));
    }
    tensor.copy_(it->second);
  }
  return grown;
}

}  // namespace flywheel::model
