// The `llm_judge` reward's prompt template: text with {field} placeholders.
//
//   {prompt}      the record's "prompt" (a string), else the prompt the policy saw
//   {completion}  the completion being judged
//   {KEY}         any other field of the record: a string as it is, a number or a boolean as
//                 JSON writes it ({answer}, {reference}, ...)
//   {{ and }}     literal braces
//
// Every piece of text is taken as UTF-8, invalid bytes replaced (U+FFFD).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/rewards/reward_function.h"

namespace flywheel::rollout {

class JudgeTemplate {
 public:
  // InvalidArgument naming the character offset of an unmatched brace, or of a field name that
  // is empty or holds a character other than letters, digits, '_', '-' and '.'.
  static absl::StatusOr<JudgeTemplate> parse(const std::string& text);

  // The judge's prompt for one sample. InvalidArgument naming the record and the field when the
  // record lacks it, or holds an object, a list or null there.
  absl::StatusOr<std::string> render(const rewards::RewardInput& input) const;

  // The field names, in order of appearance (repeats included).
  std::vector<std::string> fields() const;

 private:
  struct Piece {
    bool field = false;
    std::string text;  // literal text, or the field's name
  };
  std::vector<Piece> pieces_;
};

}  // namespace flywheel::rollout
