// A custom advantage estimator: each response's score minus the median score of its group
// (robust to one outlier reward), broadcast over its valid tokens.
#pragma once

#include <memory>

#include "flywheel/algos/advantages.h"

namespace flywheel_example {

class MedianBaseline : public flywheel::algos::AdvantageEstimator {
 public:
  static absl::StatusOr<std::unique_ptr<flywheel::algos::AdvantageEstimator>> create(
      const flywheel::algos::EstimatorOptions& options);
  absl::StatusOr<flywheel::algos::AdvantageResult> compute(
      const flywheel::algos::AdvantageInput& input) const override;
};

}  // namespace flywheel_example
