// A custom policy loss: CISPO (MiniMax-M1) -- REINFORCE weighted by the detached, clipped
// importance ratio, so clipped tokens still get gradient:
//   l = -sg(clamp(rho, 0, 1 + clip_high)) * A * lp_new,   rho = exp(lp_new - lp_old)
#pragma once

#include <memory>

#include "flywheel/algos/policy_loss.h"

namespace flywheel_example {

class CispoLoss : public flywheel::algos::PolicyLoss {
 public:
  static absl::StatusOr<std::unique_ptr<flywheel::algos::PolicyLoss>> create(
      const flywheel::algos::PolicyLossOptions& options);
  absl::StatusOr<flywheel::algos::LossResult> compute(
      const flywheel::algos::PolicyLossInput& input) const override;

 private:
  explicit CispoLoss(double clip_high) : clip_high_(clip_high) {}
  double clip_high_;
};

}  // namespace flywheel_example
