#include "flywheel/rewards/composite_reward.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::rewards {

absl::StatusOr<std::shared_ptr<const CompositeReward>> CompositeReward::create(
    const core::RewardsOptions& options, core::PluginRegistry& registry, int64_t max_new_tokens,
    const std::string& config_dir) {
  FLYWHEEL_RETURN_IF_ERROR(options.validate());
  auto& functions = registry.get<RewardFunction, const RewardSpec&>();
  std::vector<WeightedReward> parts;
  std::set<std::string> labels;
  for (size_t i = 0; i < options.functions.size(); ++i) {
    const core::RewardFunctionOptions& f = options.functions[i];
    const std::string where = absl::StrCat("rewards.functions[", i, "] (", f.name, ")");
    RewardSpec spec;
    spec.name = f.name;
    spec.params = f.params;
    spec.max_new_tokens = max_new_tokens;
    spec.call_timeout_s = options.timeout_s;
    spec.config_dir = config_dir;
    absl::StatusOr<std::unique_ptr<RewardFunction>> made = functions.create(f.name, spec);
    if (!made.ok()) {
      return absl::Status(made.status().code(), absl::StrCat(where, ": ", made.status().message()));
    }
    WeightedReward part;
    part.label = f.label.empty() ? f.name : f.label;
    if (!labels.insert(part.label).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": label '", part.label, "' is used twice; give one of them another `label`"));
    }
    part.weight = f.weight;
    part.function = std::move(*made);
    parts.push_back(std::move(part));
  }
  return std::make_shared<const CompositeReward>(std::move(parts), options.fallback_score);
}

ScoredSample CompositeReward::combine(const std::vector<PartResult>& results) const {
  ScoredSample out;
  std::map<int32_t, double> steps;  // process rewards by end, every part's
  for (size_t i = 0; i < parts_.size(); ++i) {
    const WeightedReward& part = parts_[i];
    const PartResult& r = results.at(i);
    double score = fallback_score_;
    if (r.timed_out) {
      ++out.timeouts;
      out.errors.push_back(absl::StrCat(part.label, ": timed out"));
    } else if (!r.output.ok()) {
      out.errors.push_back(absl::StrCat(part.label, ": ", r.output.status().message()));
    } else {
      score = r.output->score;
      for (const auto& [name, value] : r.output->components) {
        out.parts[absl::StrCat(part.label, "/", name)] = value;
      }
    }
    out.parts[part.label] = score;
    out.reward += part.weight * score;
    if (!r.timed_out && r.output.ok()) {
      const RewardOutput& o = *r.output;
      for (size_t k = 0; k < o.step_ends.size() && k < o.step_rewards.size(); ++k) {
        steps[o.step_ends[k]] += part.weight * o.step_rewards[k];
      }
    }
  }
  for (const auto& [end, reward] : steps) {
    out.step_ends.push_back(end);
    out.step_rewards.push_back(reward);
  }
  // A judge's agreement with each other function that scored this sample (1 or 0 per sample;
  // its mean is the agreement rate): both read as pass at >= 0.5.
  for (size_t j = 0; j < parts_.size(); ++j) {
    if (!parts_[j].function->judge() || !results[j].output.ok() || results[j].timed_out) continue;
    for (size_t k = 0; k < parts_.size(); ++k) {
      if (parts_[k].function->judge() || !results[k].output.ok() || results[k].timed_out) continue;
      const bool agree = (results[j].output->score >= kPass) == (results[k].output->score >= kPass);
      out.parts[absl::StrCat(parts_[j].label, "/agreement/", parts_[k].label)] = agree ? 1 : 0;
    }
  }
  return out;
}

ScoredSample CompositeReward::score(const RewardInput& input) const {
  std::vector<PartResult> results(parts_.size());
  for (size_t i = 0; i < parts_.size(); ++i) results[i].output = parts_[i].function->score(input);
  return combine(results);
}

}  // namespace flywheel::rewards
