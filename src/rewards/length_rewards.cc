// Length-shaped rewards: DAPO's overlong_penalty, a per-token length_penalty and a
// repetition_penalty from the ratio of repeated n-grams.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "builtin_factories.h"
#include "flywheel/core/overlong.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/rewards/param_reader.h"

namespace flywheel::rewards {
namespace {

// The completion's length in tokens: its ids, or (scored offline without a tokenizer) an error.
absl::StatusOr<int64_t> token_count(const RewardInput& input, absl::string_view function) {
  if (input.completion_ids.empty() && !input.completion.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(input.record_name, ": reward '", function,
                     "' counts tokens and this completion has no token ids (score with a "
                     "tokenizer, or give \"completion_ids\")"));
  }
  return static_cast<int64_t>(input.completion_ids.size());
}

class OverlongPenalty : public RewardFunction {
 public:
  OverlongPenalty(int64_t max_len, int64_t buffer_len, double factor)
      : max_len_(max_len), buffer_len_(buffer_len), factor_(factor) {}
  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override {
    FLYWHEEL_ASSIGN_OR_RETURN(int64_t n, token_count(input, "overlong_penalty"));
    RewardOutput out;
    out.score = core::overlong_penalty(n, max_len_, buffer_len_, factor_);
    return out;
  }

 private:
  int64_t max_len_, buffer_len_;
  double factor_;
};

class LengthPenalty : public RewardFunction {
 public:
  LengthPenalty(int64_t free_tokens, double per_token, double max_penalty)
      : free_tokens_(free_tokens), per_token_(per_token), max_penalty_(max_penalty) {}
  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override {
    FLYWHEEL_ASSIGN_OR_RETURN(int64_t n, token_count(input, "length_penalty"));
    RewardOutput out;
    out.score = -std::min(max_penalty_,
                          per_token_ * static_cast<double>(std::max<int64_t>(0, n - free_tokens_)));
    return out;
  }

 private:
  int64_t free_tokens_;
  double per_token_, max_penalty_;
};

// The completion as a sequence of unit ids: its token ids, or (unit: words) its
// whitespace-separated words numbered by first appearance.
std::vector<int64_t> units(const RewardInput& input, bool words) {
  if (!words) return std::vector<int64_t>(input.completion_ids.begin(), input.completion_ids.end());
  std::vector<int64_t> out;
  std::unordered_map<std::string_view, int64_t> ids;
  for (absl::string_view word :
       absl::StrSplit(input.completion, absl::ByAnyChar(" \t\n\v\f\r"), absl::SkipEmpty())) {
    const std::string_view key(word.data(), word.size());
    out.push_back(ids.try_emplace(key, static_cast<int64_t>(ids.size())).first->second);
  }
  return out;
}

class RepetitionPenalty : public RewardFunction {
 public:
  RepetitionPenalty(int64_t n, bool words, double factor) : n_(n), words_(words), factor_(factor) {}
  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override {
    if (!words_) FLYWHEEL_RETURN_IF_ERROR(token_count(input, "repetition_penalty").status());
    const std::vector<int64_t> u = units(input, words_);
    RewardOutput out;
    const int64_t total = static_cast<int64_t>(u.size()) - n_ + 1;
    if (total <= 0) {
      out.components["repeated_ratio"] = 0;
      return out;
    }
    // An n-gram is the bytes of its n unit ids: compared exactly, not by a hash of them.
    std::unordered_set<std::string_view> seen;
    seen.reserve(static_cast<size_t>(total));
    int64_t repeated = 0;
    for (int64_t i = 0; i < total; ++i) {
      const std::string_view ngram(reinterpret_cast<const char*>(u.data() + i),
                                   static_cast<size_t>(n_) * sizeof(int64_t));
      if (!seen.insert(ngram).second) ++repeated;
    }
    const double ratio = static_cast<double>(repeated) / static_cast<double>(total);
    out.components["repeated_ratio"] = ratio;
    out.score = -factor_ * ratio;
    return out;
  }

 private:
  int64_t n_;
  bool words_;
  double factor_;
};

int64_t default_max_len(const RewardSpec& spec) {
  return spec.max_new_tokens > 0 ? spec.max_new_tokens : 0;
}

}  // namespace

RewardPtr make_overlong_penalty_reward(const RewardSpec& spec) {
  ParamReader r(spec);
  const int64_t max_len = r.integer("max_len", default_max_len(spec), 0, int64_t{1} << 40);
  const int64_t buffer_len = r.integer("buffer_len", max_len / 5, 0, int64_t{1} << 40);
  const double factor = r.number_in("factor", 1.0, 0, 1e6);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  if (max_len <= 0) {
    return absl::InvalidArgumentError(
        "reward 'overlong_penalty': option 'max_len' must be set (it defaults to "
        "rollout.max_new_tokens, which is unknown here)");
  }
  if (buffer_len > max_len) {
    return absl::InvalidArgumentError(absl::StrCat("reward 'overlong_penalty': buffer_len ",
                                                   buffer_len, " exceeds max_len ", max_len));
  }
  return std::unique_ptr<RewardFunction>(new OverlongPenalty(max_len, buffer_len, factor));
}

RewardPtr make_length_penalty_reward(const RewardSpec& spec) {
  ParamReader r(spec);
  const int64_t free_tokens = r.integer("free_tokens", 0, 0, int64_t{1} << 40);
  const double per_token = r.number_in("per_token", 0.001, 0, 1e6);
  const double max_penalty = r.number_in("max_penalty", 1.0, 0, 1e6);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  return std::unique_ptr<RewardFunction>(new LengthPenalty(free_tokens, per_token, max_penalty));
}

RewardPtr make_repetition_penalty_reward(const RewardSpec& spec) {
  ParamReader r(spec);
  const int64_t n = r.integer("ngram", 3, 1, 64);
  const bool words = r.choice("unit", "tokens", {"tokens", "words"}) == "words";
  const double factor = r.number_in("factor", 1.0, 0, 1e6);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  return std::unique_ptr<RewardFunction>(new RepetitionPenalty(n, words, factor));
}

}  // namespace flywheel::rewards
