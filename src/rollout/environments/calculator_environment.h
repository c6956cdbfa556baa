// `calculator`: the model calls a calculator by writing <calc>EXPRESSION</calc> at the end of a
// turn (the turn stops at "</calc>"); the environment answers <result>VALUE</result>, or
// <error>PROBLEM</error> for an expression it cannot evaluate (arithmetic.h: exact rationals,
// no shell). A turn without a call holds the final answer and ends the episode.
//
// params: max_expression_chars (default 200).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "environments/arithmetic.h"
#include "flywheel/rollout/environment.h"

namespace flywheel::rollout {

class CalculatorEnvironment : public Environment {
 public:
  static absl::StatusOr<std::unique_ptr<Environment>> create(const EnvironmentSpec& spec);

  absl::StatusOr<EpisodeStart> reset(const core::Json& record) const override;
  absl::StatusOr<EnvironmentStep> step(EpisodeState* state, const ModelTurn& turn) const override;
  std::vector<std::string> turn_stop_strings() const override { return {"</calc>"}; }

 private:
  explicit CalculatorEnvironment(const ArithmeticLimits& limits) : limits_(limits) {}

  ArithmeticLimits limits_;
};

}  // namespace flywheel::rollout
