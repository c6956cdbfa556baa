#include "environments/calculator_environment.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/param_reader.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::rollout {
namespace {

constexpr absl::string_view kOpen = "<calc>";
constexpr absl::string_view kClose = "</calc>";

}  // namespace

absl::StatusOr<std::unique_ptr<Environment>> CalculatorEnvironment::create(
    const EnvironmentSpec& spec) {
  core::ParamReader r(absl::StrCat("environment '", spec.name, "'"), spec.params);
  ArithmeticLimits limits;
  limits.max_chars = static_cast<size_t>(r.integer("max_expression_chars", 200, 1, 1 << 16));
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  return std::unique_ptr<Environment>(new CalculatorEnvironment(limits));
}

absl::StatusOr<EpisodeStart> CalculatorEnvironment::reset(const core::Json&) const {
  return EpisodeStart{};  // stateless; the prompt says what to do
}

absl::StatusOr<EnvironmentStep> CalculatorEnvironment::step(EpisodeState*,
                                                            const ModelTurn& turn) const {
  EnvironmentStep out;
  const absl::string_view text = turn.text;
  const size_t open = text.rfind(kOpen);
  if (turn.truncated || open == absl::string_view::npos || !absl::EndsWith(text, kClose) ||
      open + kOpen.size() > text.size() - kClose.size()) {
    out.done = true;  // no (complete) call: this turn holds the answer
    return out;
  }
  out.tool_call = true;
  const absl::string_view expression =
      text.substr(open + kOpen.size(), text.size() - kClose.size() - open - kOpen.size());
  absl::StatusOr<std::string> value = evaluate_arithmetic(expression, limits_);
  out.observation = Observation::of_text(
      value.ok() ? absl::StrCat("<result>", *value, "</result>")
                 : absl::StrCat("<error>", value.status().message(), "</error>"));
  out.info["calc_errors"] = value.ok() ? 0 : 1;
  return out;
}

}  // namespace flywheel::rollout
