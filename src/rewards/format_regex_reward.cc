// format_regex: `score` when the completion matches a PCRE2 pattern (whole completion by default,
// dot matching newlines), else 0. Matching runs under PCRE2's match limits, so a pathological
// pattern or completion takes bounded time: a completion that exhausts them scores 0 and reports
// the component `limit_exceeded`.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "builtin_factories.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/rewards/param_reader.h"

namespace flywheel::rewards {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(code, message, sizeof(message));
  return reinterpret_cast<char*>(message);
}

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct ContextDeleter {
  void operator()(pcre2_match_context* c) const { pcre2_match_context_free(c); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* d) const { pcre2_match_data_free(d); }
};

class FormatRegexReward : public RewardFunction {
 public:
  FormatRegexReward(std::unique_ptr<pcre2_code, CodeDeleter> code,
                    std::unique_ptr<pcre2_match_context, ContextDeleter> context, double score)
      : code_(std::move(code)), context_(std::move(context)), score_(score) {}

  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override {
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr));
    if (!data) return absl::ResourceExhaustedError("format_regex: out of memory");
    const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(input.completion.data()),
                               input.completion.size(), 0, 0, data.get(), context_.get());
    RewardOutput out;
    if (rc >= 0) {
      out.score = score_;
    } else if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
               rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      out.components["limit_exceeded"] = 1;
    } else if (rc != PCRE2_ERROR_NOMATCH) {
      return absl::InternalError(absl::StrCat("format_regex: ", pcre2_message(rc)));
    }
    return out;
  }

 private:
  std::unique_ptr<pcre2_code, CodeDeleter> code_;
  std::unique_ptr<pcre2_match_context, ContextDeleter> context_;
  double score_;
};

}  // namespace

RewardPtr make_format_regex_reward(const RewardSpec& spec) {
  ParamReader r(spec);
  const std::string pattern = r.string("pattern", "");
  const bool full_match = r.boolean("full_match", true);
  const bool dotall = r.boolean("dotall", true);
  const double score = r.number("score", 1.0);
  const int64_t match_limit = r.integer("match_limit", 1000000, 1000, 1000000000);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  if (pattern.empty()) {
    return absl::InvalidArgumentError("reward 'format_regex': option 'pattern' must be set");
  }
  // Invalid UTF-8 in a completion is matched as bytes that match nothing, not an error.
  uint32_t flags = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  if (dotall) flags |= PCRE2_DOTALL;
  if (full_match) flags |= PCRE2_ANCHORED | PCRE2_ENDANCHORED;
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  std::unique_ptr<pcre2_code, CodeDeleter> code(
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), flags,
                    &error_code, &error_offset, nullptr));
  if (!code) {
    return absl::InvalidArgumentError(
        absl::StrCat("reward 'format_regex': option 'pattern' does not compile at offset ",
                     error_offset, ": ", pcre2_message(error_code)));
  }
  pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
  std::unique_ptr<pcre2_match_context, ContextDeleter> context(pcre2_match_context_create(nullptr));
  pcre2_set_match_limit(context.get(), static_cast<uint32_t>(match_limit));
  pcre2_set_depth_limit(context.get(), 10000);
  pcre2_set_heap_limit(context.get(), 64 * 1024);  // KiB
  return std::unique_ptr<RewardFunction>(
      new FormatRegexReward(std::move(code), std::move(context), score));
}

}  // namespace flywheel::rewards
