#include "flywheel/eval/synthetic_tasks.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/json.h"
#include "flywheel/core/jsonl_io.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::eval {
namespace {

// `n` written least-significant digit first when `lsd`.
std::string digits_of(int64_t n, bool lsd) {
  std::string s = std::to_string(n);
  if (lsd) std::reverse(s.begin(), s.end());
  return s;
}

std::string line(std::initializer_list<std::pair<const char*, std::string>> fields) {
  core::Json json = core::Json::object();
  for (const auto& [key, value] : fields) json.set(key, core::Json(value));
  return json.dump() + "\n";
}

std::string addition_record(int64_t a, int64_t b, const std::string& order) {
  const bool operands_lsd = order == "lsd";
  const std::string sum = digits_of(a + b, order != "msd");
  return line(
      {{"prompt", absl::StrCat(digits_of(a, operands_lsd), "+", digits_of(b, operands_lsd), "=")},
       {"response", sum},
       {"answer", sum}});
}

// A preference pair for "a+b=": the sum (chosen) and a near miss (rejected): the sum with one
// digit changed, the leading digit never to 0.
std::string addition_pair_record(int64_t a, int64_t b, const std::string& order,
                                 std::mt19937_64& rng) {
  std::string wrong = std::to_string(a + b);
  const size_t at = std::uniform_int_distribution<size_t>(0, wrong.size() - 1)(rng);
  const int low = at == 0 && wrong.size() > 1 ? 1 : 0;
  char digit = wrong[at];
  while (digit == wrong[at])
    digit = static_cast<char>('0' + std::uniform_int_distribution<int>(low, 9)(rng));
  wrong[at] = digit;
  const bool operands_lsd = order == "lsd", sum_lsd = order != "msd";
  const std::string sum = digits_of(a + b, sum_lsd);
  if (sum_lsd) std::reverse(wrong.begin(), wrong.end());
  return line(
      {{"prompt", absl::StrCat(digits_of(a, operands_lsd), "+", digits_of(b, operands_lsd), "=")},
       {"chosen", sum},
       {"rejected", wrong},
       {"answer", sum}});
}

// A judge's example "c|a+b=": c is the sum (half the time) or a wrong answer like a policy's
// (some digits changed, or one, often by one as a carry gone wrong, a digit dropped or added,
// another number), and
// the judge's response works the sum out and compares it digit by digit before its verdict:
// "<sum> <marks> yes|no" (see synthetic_tasks.h).
// An answer to a+b like a policy's: the sum (`sum`, written as the task writes it) when
// `correct`, else a wrong one (some digits changed, or one, often by one as a carry gone wrong,
// a digit dropped or added, another number).
std::string policy_like_answer(int64_t a, int64_t b, const std::string& sum, bool sum_lsd,
                               bool correct, std::mt19937_64& rng) {
  std::string shown = sum;
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  while (!correct && shown == sum) {
    const int kind = uniform(0, 9);
    shown = sum;
    if (kind < 4) {  // any digits changed, each with probability 1/2
      for (char& c : shown) {
        if (uniform(0, 1) == 0) c = static_cast<char>('0' + uniform(0, 9));
      }
    } else if (kind < 7) {  // one digit changed, half the time by one (a carry gone wrong)
      char& c = shown[uniform(0, static_cast<int>(shown.size()) - 1)];
      const int by_one = (c - '0' + (uniform(0, 1) == 1 ? 1 : 9)) % 10;
      c = static_cast<char>('0' + (uniform(0, 1) == 0 ? by_one : uniform(0, 9)));
    } else if (kind == 7 && shown.size() > 1) {  // a digit dropped
      shown.erase(uniform(0, static_cast<int>(shown.size()) - 1), 1);
    } else if (kind == 8) {  // a digit added
      shown.insert(uniform(0, static_cast<int>(shown.size())), 1,
                   static_cast<char>('0' + uniform(0, 9)));
    } else {  // another number of about the same size
      shown = digits_of(uniform(0, static_cast<int>(2 * (a + b))), sum_lsd);
    }
  }
  return shown;
}

std::string addition_judge_record(int64_t a, int64_t b, const std::string& order,
                                  std::mt19937_64& rng) {
  const bool operands_lsd = order == "lsd", sum_lsd = order != "msd";
  const std::string sum = digits_of(a + b, sum_lsd);
  const bool correct = std::uniform_int_distribution<int>(0, 1)(rng) == 0;
  const std::string shown = policy_like_answer(a, b, sum, sum_lsd, correct, rng);
  // Digit by digit: '=' where the shown answer has the sum's digit, 'x' where it differs or
  // either runs out.
  std::string marks;
  for (size_t k = 0; k < std::max(sum.size(), shown.size()); ++k) {
    marks.push_back(k < sum.size() && k < shown.size() && sum[k] == shown[k] ? '=' : 'x');
  }
  const std::string response = absl::StrCat(sum, " ", marks, correct ? " yes" : " no");
  return line({{"prompt", absl::StrCat(shown, "|", digits_of(a, operands_lsd), "+",
                                       digits_of(b, operands_lsd), "=")},
               {"response", response},
               {"answer", response}});
}

int64_t power_of_ten(int digits) {
  int64_t p = 1;
  for (int i = 0; i < digits; ++i) p *= 10;
  return p;
}

// `n` zero-padded to `width` digits.
std::string padded(int64_t n, size_t width) {
  std::string s = std::to_string(n);
  return std::string(width > s.size() ? width - s.size() : 0, '0') + s;
}

std::map<std::string, std::string> guess_task(const SyntheticTaskOptions& o) {
  const size_t width = std::to_string(o.guess_max).size();
  const std::string prompt = absl::StrCat("guess 1-", o.guess_max, ":");
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> target(1, o.guess_max);
  auto records = [&](int64_t n) {
    std::string lines;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = target(rng);
      core::Json json = core::Json::object();
      json.set("prompt", core::Json(prompt));
      json.set("target", core::Json(t));
      json.set("answer", core::Json(padded(t, width)));
      lines += json.dump() + "\n";
    }
    return lines;
  };
  std::map<std::string, std::string> files;
  files["eval.jsonl"] = records(o.eval);
  files["train.jsonl"] = records(o.train);
  std::string demos;
  for (int64_t i = 0; i < o.demos; ++i) {
    const int64_t t = target(rng);
    std::string stream = prompt;
    for (int64_t lo = 1, hi = o.guess_max; lo <= hi;) {  // binary search, as the environment
      const int64_t guess = (lo + hi) / 2;               // answers it
      const std::string turn = padded(guess, width);
      demos += line({{"prompt", stream}, {"response", turn}});
      if (guess == t) break;
      const char* reply = guess < t ? "higher" : "lower";
      stream += turn + reply;
      if (guess < t) {
        lo = guess + 1;
      } else {
        hi = guess - 1;
      }
    }
  }
  files["sft.jsonl"] = demos;
  return files;
}

// A process reward model's example for "a+b=": an answer like a policy's (the sum half the
// time), each digit a step labelled by whether it is the sum's digit at that place, then the
// end of the answer ("<eos>", the character tokenizer's stop token) as a step labelled by
// whether the sum ends there too (an answer that drops a digit is otherwise all right steps).
// The step-labelled record of answer `shown` to `prompt` whose sum is `sum`: a step per
// character, labelled by whether it is the sum's at that place, then (when `ended`) "<eos>".
std::string step_labelled_record(const std::string& prompt, const std::string& sum,
                                 const std::string& shown, bool ended) {
  core::Json steps = core::Json::array(), labels = core::Json::array();
  for (size_t k = 0; k < shown.size(); ++k) {
    steps.push_back(core::Json(std::string(1, shown[k])));
    labels.push_back(core::Json(k < sum.size() && sum[k] == shown[k]));
  }
  if (ended) {
    steps.push_back(core::Json("<eos>"));
    labels.push_back(core::Json(shown.size() == sum.size()));
  }
  core::Json json = core::Json::object();
  json.set("prompt", core::Json(prompt));
  json.set("completions", std::move(steps));
  json.set("labels", std::move(labels));
  json.set("answer", core::Json(sum));
  return json.dump() + "\n";
}

std::string addition_prm_record(int64_t a, int64_t b, const std::string& order,
                                std::mt19937_64& rng) {
  const bool operands_lsd = order == "lsd", sum_lsd = order != "msd";
  const std::string sum = digits_of(a + b, sum_lsd);
  const bool correct = std::uniform_int_distribution<int>(0, 1)(rng) == 0;
  const std::string shown = policy_like_answer(a, b, sum, sum_lsd, correct, rng);
  return step_labelled_record(
      absl::StrCat(digits_of(a, operands_lsd), "+", digits_of(b, operands_lsd), "="), sum, shown,
      /*ended=*/true);
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> make_synthetic_task(
    const SyntheticTaskOptions& options) {
  const SyntheticTaskOptions& o = options;
  const bool calculator = o.task == "calculator", preference = o.task == "addition-pairs",
             judge = o.task == "addition-judge", prm = o.task == "addition-prm";
  if (o.task == "guess") {
    if (o.guess_max < 2 || o.guess_max > 1000000) {
      return absl::InvalidArgumentError(
          absl::StrCat("guess: the maximum must be in [2, 1000000], got ", o.guess_max));
    }
    return guess_task(o);
  }
  if (!calculator && !preference && !judge && !prm && o.task != "addition") {
    return absl::InvalidArgumentError(absl::StrCat("unknown task '", o.task,
                                                   "' (available: addition, addition-pairs, "
                                                   "addition-judge, addition-prm, calculator, "
                                                   "guess)"));
  }
  if (!calculator && o.digit_order != "msd" && o.digit_order != "sum-lsd" &&
      o.digit_order != "lsd") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown digit order '", o.digit_order, "' (msd, sum-lsd or lsd)"));
  }
  if (o.digits < 1 || o.digits > 9) {
    return absl::InvalidArgumentError(absl::StrCat("digits must be in [1, 9], got ", o.digits));
  }
  const int64_t a_high = power_of_ten(o.digits), a_low = a_high / 10;
  const int second_digits = calculator ? 2 : o.digits;
  const int64_t b_high = power_of_ten(second_digits), b_low = b_high / 10;
  const double pairs = static_cast<double>(a_high - a_low) * static_cast<double>(b_high - b_low);
  if (static_cast<double>(o.train + o.eval) > pairs / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.train + o.eval, " records need more distinct operand pairs than there are (",
                     static_cast<int64_t>(pairs), ")"));
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> first(a_low, a_high - 1), second(b_low, b_high - 1);
  // Its own generator: the pairs' prompts are the addition task's of the same seed.
  std::mt19937_64 near_miss_rng(o.seed + 0x9e3779b97f4a7c15ULL);
  std::set<std::pair<int64_t, int64_t>> seen;
  std::vector<std::pair<int64_t, int64_t>> drawn;
  auto draw = [&](int64_t n) {
    std::string lines;
    for (int64_t i = 0; i < n;) {
      const int64_t a = first(rng), b = second(rng);
      if (!seen.insert({a, b}).second) continue;  // held-out pairs never appear in training
      if (calculator) {
        lines += line({{"prompt", absl::StrCat(a, "*", b, "=")}, {"answer", absl::StrCat(a * b)}});
      } else if (preference) {
        lines += addition_pair_record(a, b, o.digit_order, near_miss_rng);
      } else if (judge) {
        lines += addition_judge_record(a, b, o.digit_order, near_miss_rng);
      } else if (prm) {
        lines += addition_prm_record(a, b, o.digit_order, near_miss_rng);
      } else {
        lines += addition_record(a, b, o.digit_order);
      }
      drawn.emplace_back(a, b);
      ++i;
    }
    return lines;
  };
  std::map<std::string, std::string> files;
  files["eval.jsonl"] = draw(o.eval);
  drawn.clear();
  files["train.jsonl"] = draw(o.train);
  if (calculator) {
    std::string demos;
    for (int64_t i = 0; i < std::min<int64_t>(o.demos, drawn.size()); ++i) {
      const auto [a, b] = drawn[i];
      const std::string prompt = absl::StrCat(a, "*", b, "=");
      const std::string call = absl::StrCat("<calc>", a, "*", b, "</calc>");
      demos += line({{"prompt", prompt}, {"response", call}});
      demos += line({{"prompt", absl::StrCat(prompt, call, "<result>", a * b, "</result>")},
                     {"response", absl::StrCat(a * b)}});
    }
    files["sft.jsonl"] = demos;
  }
  return files;
}

absl::StatusOr<std::string> label_addition_samples(const std::string& path) {
  FLYWHEEL_ASSIGN_OR_RETURN(std::unique_ptr<core::JsonlReader> in, core::JsonlReader::open(path));
  std::string lines;
  while (true) {
    absl::StatusOr<std::optional<core::Json>> line = in->next();
    if (!line.ok()) return line.status();
    if (!line->has_value()) break;
    const core::Json& r = **line;
    const core::Json* prompt = r.is_object() ? r.find("prompt") : nullptr;
    const core::Json* answer = r.is_object() ? r.find("answer") : nullptr;
    const core::Json* completions = r.is_object() ? r.find("completions") : nullptr;
    if (prompt == nullptr || !prompt->is_string() || answer == nullptr || !answer->is_string() ||
        completions == nullptr || !completions->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(in->where(),
                       ": expected flywheel generate's output: \"prompt\" and \"answer\" strings "
                       "and a \"completions\" list"));
    }
    for (const core::Json& c : completions->as_array()) {
      const core::Json* text = c.is_object() ? c.find("text") : nullptr;
      const core::Json* finish = c.is_object() ? c.find("finish_reason") : nullptr;
      if (text == nullptr || !text->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(in->where(), ": a completion without its \"text\""));
      }
      std::string shown = text->as_string();
      const bool ended = finish != nullptr && finish->is_string() && finish->as_string() == "stop";
      if (ended && absl::EndsWith(shown, "<eos>")) shown.resize(shown.size() - 5);
      lines += step_labelled_record(prompt->as_string(), answer->as_string(), shown, ended);
    }
  }
  return lines;
}

}  // namespace flywheel::eval
