#include "environments/guess_number_environment.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/param_reader.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::rollout {
namespace {

struct GuessState : EpisodeState {
  int64_t target = 0;
};

// FNV-1a of the record's JSON text: the same record always hides the same number.
uint64_t fnv1a(absl::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The last run of digits in `text` as a number; false when there is none (or it has over 18
// digits).
bool last_integer(absl::string_view text, int64_t* out) {
  size_t end = text.size();
  while (end > 0 && !absl::ascii_isdigit(static_cast<unsigned char>(text[end - 1]))) --end;
  if (end == 0) return false;
  size_t begin = end;
  while (begin > 0 && absl::ascii_isdigit(static_cast<unsigned char>(text[begin - 1]))) --begin;
  return end - begin <= 18 && absl::SimpleAtoi(text.substr(begin, end - begin), out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Environment>> GuessNumberEnvironment::create(
    const EnvironmentSpec& spec) {
  core::ParamReader r(absl::StrCat("environment '", spec.name, "'"), spec.params);
  GuessNumberOptions o;
  o.max = r.integer("max", o.max, 1, int64_t{1} << 40);
  o.reward_correct = r.number("reward_correct", o.reward_correct);
  o.turn_penalty = r.number_in("turn_penalty", o.turn_penalty, 0, 1e6);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());
  return std::unique_ptr<Environment>(new GuessNumberEnvironment(o));
}

absl::StatusOr<EpisodeStart> GuessNumberEnvironment::reset(const core::Json& record) const {
  auto state = std::make_unique<GuessState>();
  const core::Json* target = record.is_object() ? record.find("target") : nullptr;
  if (target != nullptr) {
    if (!target->is_integer() || target->as_int() < 1 || target->as_int() > options_.max) {
      return absl::InvalidArgumentError(absl::StrCat(
          "guess_number: the record's 'target' must be an integer in [1, ", options_.max, "]"));
    }
    state->target = target->as_int();
  } else {
    state->target =
        static_cast<int64_t>(fnv1a(record.dump()) % static_cast<uint64_t>(options_.max)) + 1;
  }
  EpisodeStart start;
  start.state = std::move(state);
  return start;
}

absl::StatusOr<EnvironmentStep> GuessNumberEnvironment::step(EpisodeState* state,
                                                             const ModelTurn& turn) const {
  auto* game = dynamic_cast<GuessState*>(state);
  if (game == nullptr) return absl::InternalError("guess_number: step without reset");
  EnvironmentStep out;
  int64_t guess = 0;
  if (!last_integer(turn.text, &guess)) {
    out.observation =
        Observation::of_text(absl::StrCat("guess an integer from 1 to ", options_.max));
    return out;
  }
  out.tool_call = true;  // a guess
  if (guess == game->target) {
    out.observation = Observation::of_text("correct");
    out.done = true;
    out.reward = std::max(
        0.0, options_.reward_correct - options_.turn_penalty * static_cast<double>(turn.index));
  } else {
    out.observation = Observation::of_text(guess < game->target ? "higher" : "lower");
  }
  return out;
}

}  // namespace flywheel::rollout
