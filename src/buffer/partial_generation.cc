#include "flywheel/buffer/partial_generation.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace flywheel::buffer {

int64_t min_version(const PartialGeneration& partial) {
  int64_t v = std::numeric_limits<int64_t>::max();
  for (const PartialSample& s : partial) {
    for (int32_t version : s.versions) v = std::min<int64_t>(v, version);
  }
  return v;
}

int64_t token_count(const PartialGeneration& partial) {
  int64_t n = 0;
  for (const PartialSample& s : partial) n += static_cast<int64_t>(s.token_ids.size());
  return n;
}

size_t byte_size(const PartialGeneration& partial) {
  size_t bytes = 0;
  for (const PartialSample& s : partial) bytes += 12 * s.token_ids.size() + 16;
  return bytes;
}

absl::Status validate_partial(const PartialGeneration& partial, const ValidationLimits& limits,
                              int64_t current_version) {
  auto bad = [](const std::string& field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
  };
  if (static_cast<int64_t>(partial.size()) != limits.group_size) {
    return bad("partial", absl::StrCat("expected ", limits.group_size,
                                       " samples (the group size), got ", partial.size()));
  }
  for (size_t i = 0; i < partial.size(); ++i) {
    const PartialSample& s = partial[i];
    const std::string at = absl::StrCat("partial[", i, "]");
    const size_t n = s.token_ids.size();
    if (s.logprobs.size() != n || s.versions.size() != n) {
      return bad(
          at, absl::StrCat("token_ids (", n, "), logprobs (", s.logprobs.size(), ") and versions (",
                           s.versions.size(), ") must have equal lengths"));
    }
    if (static_cast<int64_t>(n) > limits.max_tokens) {
      return bad(at, absl::StrCat(n, " tokens exceed the limit of ", limits.max_tokens));
    }
    for (size_t k = 0; k < n; ++k) {
      const std::string token = absl::StrCat("[", k, "]");
      if (s.token_ids[k] < 0 || s.token_ids[k] >= limits.vocab_size) {
        return bad(at + ".token_ids" + token,
                   absl::StrCat("id ", s.token_ids[k], " outside the vocabulary [0, ",
                                limits.vocab_size, ")"));
      }
      if (!std::isfinite(s.logprobs[k]) || s.logprobs[k] > 0) {
        return bad(at + ".logprobs" + token,
                   absl::StrCat("must be finite and <= 0, got ", s.logprobs[k]));
      }
      if (s.versions[k] < 0 || s.versions[k] > current_version) {
        return bad(at + ".versions" + token,
                   absl::StrCat("version ", s.versions[k], " is outside [0, ", current_version,
                                "] (the learner's version)"));
      }
    }
    const bool known = s.finish_reason == "stop" || s.finish_reason == "length";
    if (s.finished ? !known : !s.finish_reason.empty()) {
      return bad(at + ".finish_reason",
                 absl::StrCat("'", s.finish_reason, "' for a ",
                              s.finished ? "finished sample (stop or length)"
                                         : "sample still generating (must be empty)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace flywheel::buffer
