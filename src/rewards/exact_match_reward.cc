// exact_match: 1 when the normalised completion equals the normalised reference (or one of a
// list of references), else 0.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "builtin_factories.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/rewards/param_reader.h"
#include "text_normalize.h"

namespace flywheel::rewards {
namespace {

class ExactMatchReward : public RewardFunction {
 public:
  ExactMatchReward(std::string answer_key, std::string after, TextNormalization normalization)
      : answer_key_(std::move(answer_key)),
        after_(std::move(after)),
        normalization_(normalization) {}

  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override {
    const core::Json* answer = input.record->find(answer_key_);
    if (answer == nullptr) return missing_key_error(input, "exact_match", answer_key_);
    std::vector<const core::Json*> references;
    if (answer->is_array()) {
      for (const core::Json& a : answer->as_array()) references.push_back(&a);
    } else {
      references.push_back(answer);
    }
    absl::string_view judged = input.completion;
    if (!after_.empty()) {
      const size_t at = judged.rfind(after_);
      if (at != absl::string_view::npos) judged.remove_prefix(at + after_.size());
    }
    const std::string completion = normalize_text(std::string(judged), normalization_);
    RewardOutput out;
    for (const core::Json* reference : references) {
      std::string text;
      if (reference->is_string()) {
        text = reference->as_string();
      } else if (reference->is_number()) {
        text = reference->dump();
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(input.record_name, ": exact_match: '", answer_key_,
                         "' must be a string, a number or a list of them, not ",
                         core::Json::type_name(reference->type())));
      }
      if (normalize_text(text, normalization_) == completion) out.score = 1.0;
    }
    return out;
  }

 private:
  std::string answer_key_;
  std::string after_;  // judge only what follows its last occurrence
  TextNormalization normalization_;
};

}  // namespace

RewardPtr make_exact_match_reward(const RewardSpec& spec) {
  ParamReader r(spec);
  const std::string answer_key = r.string("answer_key", "answer");
  const std::string after = r.string("after", "");
  TextNormalization n;
  n.strip = r.boolean("strip", n.strip);
  n.lowercase = r.boolean("lowercase", n.lowercase);
  n.collapse_whitespace = r.boolean("collapse_whitespace", n.collapse_whitespace);
  n.remove_punctuation = r.boolean("remove_punctuation", n.remove_punctuation);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  return std::unique_ptr<RewardFunction>(new ExactMatchReward(answer_key, after, n));
}

}  // namespace flywheel::rewards
