#include "flywheel/algos/presets.h"

#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace flywheel::algos {
namespace {

using core::AlgorithmOptions;
using core::Config;

// A preset writes the fields it determines; apply_algorithm_preset keeps explicit ones.
using Preset = std::function<void(const Config& config, AlgorithmOptions* a, std::string* filter)>;

void ppo_clip_defaults(AlgorithmOptions* a) {
  a->policy_loss = "ppo_clip";
  a->loss_agg_mode = "token-mean";
  a->clip_low = 0.2;
  a->clip_high = 0.2;
  a->clip_c = 3.0;
  a->is_correction = "none";
  a->entropy_coef = 0.0;
  a->kl_coef = 0.0;
  a->kl_in_reward = false;
  a->kl_estimator = "k3";
  a->overlong_buffer_len = 0;
}

const std::map<std::string, Preset>& presets() {
  static const std::map<std::string, Preset> kPresets = {
      {"ppo",
       [](const Config&, AlgorithmOptions* a, std::string* filter) {
         ppo_clip_defaults(a);
         a->advantage_estimator = "gae";
         a->kl_in_reward = true;
         a->kl_estimator = "k1";
         a->kl_coef = 0.001;
         a->gamma = 1.0;
         a->lam = 1.0;
         *filter = "";
       }},
      {"grpo",
       [](const Config&, AlgorithmOptions* a, std::string* filter) {
         ppo_clip_defaults(a);
         a->advantage_estimator = "grpo";
         a->kl_coef = 0.001;
         a->kl_estimator = "k3";
         *filter = "";
       }},
      {"dapo",
       [](const Config& c, AlgorithmOptions* a, std::string* filter) {
         ppo_clip_defaults(a);
         a->advantage_estimator = "grpo";
         a->clip_high = 0.28;
         a->overlong_buffer_len = c.rollout.max_new_tokens / 5;  // 4096 of 20480 in DAPO
         a->overlong_penalty_factor = 1.0;
         *filter = "nonzero_reward_std";
       }},
      {"dr_grpo",
       [](const Config&, AlgorithmOptions* a, std::string* filter) {
         ppo_clip_defaults(a);
         a->advantage_estimator = "dr_grpo";
         a->loss_agg_mode = "seq-mean-token-sum-norm";
         *filter = "";
       }},
      {"gspo",
       [](const Config&, AlgorithmOptions* a, std::string* filter) {
         ppo_clip_defaults(a);
         a->advantage_estimator = "grpo";
         a->policy_loss = "gspo";
         a->loss_agg_mode = "seq-mean-token-mean";
         a->clip_low = 3e-4;
         a->clip_high = 4e-4;
         a->clip_c = 0.0;
         *filter = "";
       }},
      {"rloo",
       [](const Config&, AlgorithmOptions* a, std::string* filter) {
         ppo_clip_defaults(a);
         a->advantage_estimator = "rloo";
         *filter = "";
       }},
      {"remax",
       [](const Config&, AlgorithmOptions* a, std::string* filter) {
         ppo_clip_defaults(a);
         a->advantage_estimator = "remax";  // the workers add one greedy response per prompt
         *filter = "";
       }},
      {"reinforce_pp",
       [](const Config&, AlgorithmOptions* a, std::string* filter) {
         ppo_clip_defaults(a);
         a->advantage_estimator = "reinforce_pp";
         a->kl_in_reward = true;
         a->kl_estimator = "k1";
         a->kl_coef = 0.001;
         *filter = "";
       }},
  };
  return kPresets;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, preset] : presets()) names.push_back(name);
  return names;
}

absl::Status apply_algorithm_preset(core::LoadedConfig* loaded) {
  core::Config& config = loaded->config;
  auto it = presets().find(config.algorithm.name);
  if (it == presets().end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown algorithm preset '", config.algorithm.name,
                     "'; known: ", absl::StrJoin(preset_names(), ", ")));
  }
  AlgorithmOptions preset = config.algorithm;
  std::string filter = config.buffer.filter;
  it->second(config, &preset, &filter);
  AlgorithmOptions& a = config.algorithm;
  auto keep = [&](const char* key, auto* field, const auto& value) {
    if (!loaded->is_set(absl::StrCat("algorithm.", key))) *field = value;
  };
  keep("advantage_estimator", &a.advantage_estimator, preset.advantage_estimator);
  keep("policy_loss", &a.policy_loss, preset.policy_loss);
  keep("loss_agg_mode", &a.loss_agg_mode, preset.loss_agg_mode);
  keep("is_correction", &a.is_correction, preset.is_correction);
  keep("clip_low", &a.clip_low, preset.clip_low);
  keep("clip_high", &a.clip_high, preset.clip_high);
  keep("clip_c", &a.clip_c, preset.clip_c);
  keep("kl_estimator", &a.kl_estimator, preset.kl_estimator);
  keep("kl_coef", &a.kl_coef, preset.kl_coef);
  keep("kl_in_reward", &a.kl_in_reward, preset.kl_in_reward);
  keep("entropy_coef", &a.entropy_coef, preset.entropy_coef);
  keep("gamma", &a.gamma, preset.gamma);
  keep("lam", &a.lam, preset.lam);
  keep("overlong_buffer_len", &a.overlong_buffer_len, preset.overlong_buffer_len);
  keep("overlong_penalty_factor", &a.overlong_penalty_factor, preset.overlong_penalty_factor);
  if (!loaded->is_set("buffer.filter")) config.buffer.filter = filter;
  if (!loaded->is_set("algorithm.loss_agg_constant") &&
      a.loss_agg_mode == "seq-mean-token-sum-norm") {
    a.loss_agg_constant = static_cast<double>(config.rollout.max_new_tokens);
  }
  return config.validate();
}

}  // namespace flywheel::algos
