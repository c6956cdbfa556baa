#include "math/math_reward.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "builtin_factories.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/rewards/param_reader.h"
#include "math/answer_extraction.h"
#include "math/math_equivalence.h"
#include "math/math_normalize.h"

namespace flywheel::rewards {
namespace math {
namespace {

// The shortest "%.*g" text that reads back as `v` (0.1 stays "0.1").
std::string shortest_double(double v) {
  char buf[40];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// A reference answer: a number as written, or the final answer of a string (a GSM8K solution
// ending in "#### 42", a MATH solution with \boxed{}); a plain string is the answer itself.
bool reference_answer(const core::Json& value, MathAnswer* out) {
  if (value.is_number()) {
    *out = parse_math_answer(value.is_integer() ? absl::StrCat(value.as_int())
                                                : shortest_double(value.as_double()));
    return true;
  }
  if (!value.is_string()) return false;
  const std::string& text = value.as_string();
  const ExtractedAnswer extracted = extract_answer(text, /*fallback_to_last_number=*/false);
  *out = parse_math_answer(extracted.found() ? extracted.text : absl::string_view(text));
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MathReward>> MathReward::create(const RewardSpec& spec) {
  ParamReader r(spec);
  MathRewardOptions options;
  options.answer_key = r.string("answer_key", options.answer_key);
  options.tolerance = r.number_in("tolerance", options.tolerance, 0.0, 1.0);
  options.fallback_to_last_number =
      r.boolean("fallback_to_last_number", options.fallback_to_last_number);
  options.correct_score = r.number("correct_score", options.correct_score);
  options.wrong_score = r.number("wrong_score", options.wrong_score);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  if (options.answer_key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reward '", spec.name, "': option 'answer_key' must not be empty"));
  }
  return std::make_unique<MathReward>(std::move(options));
}

absl::StatusOr<RewardOutput> MathReward::score(const RewardInput& input) const {
  const core::Json* value = input.record ? input.record->find(options_.answer_key) : nullptr;
  if (value == nullptr || value->is_null()) {
    return missing_key_error(input, "math", options_.answer_key);
  }
  const ExtractedAnswer extracted =
      extract_answer(input.completion, options_.fallback_to_last_number);
  bool correct = false;
  bool usable = true;
  if (extracted.found()) {
    const MathAnswer answer = parse_math_answer(extracted.text);
    MathAnswer reference;
    if (value->is_array()) {
      for (const core::Json& item : value->as_array()) {
        if (!reference_answer(item, &reference)) {
          usable = false;
          break;
        }
        if (!correct) correct = math_equivalent(reference, answer, options_.tolerance);
      }
    } else {
      usable = reference_answer(*value, &reference);
      correct = usable && math_equivalent(reference, answer, options_.tolerance);
    }
  } else if (value->is_array()) {
    for (const core::Json& item : value->as_array()) {
      usable = usable && (item.is_string() || item.is_number());
    }
  } else {
    usable = value->is_string() || value->is_number();
  }
  if (!usable) {
    return absl::InvalidArgumentError(
        absl::StrCat(input.record_name, ": reward 'math' needs '", options_.answer_key,
                     "' to be a string, a number or a list of them, not ",
                     core::Json::type_name(value->type())));
  }
  RewardOutput out;
  out.score = correct ? options_.correct_score : options_.wrong_score;
  out.components["format"] = extracted.found() ? 1.0 : 0.0;
  out.components["correct"] = correct ? 1.0 : 0.0;
  return out;
}

}  // namespace math

RewardPtr make_math_reward(const RewardSpec& spec) {
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<math::MathReward> reward,
                            math::MathReward::create(spec));
  return std::unique_ptr<RewardFunction>(std::move(reward));
}

}  // namespace flywheel::rewards
