#include "flywheel/rewards/reward_function.h"

#include "absl/strings/str_cat.h"

namespace flywheel::rewards {

std::vector<absl::StatusOr<RewardOutput>> RewardFunction::score_batch(
    const std::vector<RewardInput>& inputs) const {
  std::vector<absl::StatusOr<RewardOutput>> out;
  out.reserve(inputs.size());
  for (const RewardInput& input : inputs) out.push_back(score(input));
  return out;
}

absl::Status missing_key_error(const RewardInput& input, absl::string_view function,
                               absl::string_view key) {
  return absl::InvalidArgumentError(absl::StrCat(input.record_name, ": reward '", function,
                                                 "' needs the key '", key, "' in the record"));
}

}  // namespace flywheel::rewards
