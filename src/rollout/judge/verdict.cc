#include "flywheel/rollout/judge/verdict.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace flywheel::rollout {
namespace {

constexpr size_t kQuoted = 80;  // characters of an unreadable output an error quotes

std::string quoted(absl::string_view output) {
  if (output.size() <= kQuoted) return absl::StrCat("'", output, "'");
  return absl::StrCat("'...", output.substr(output.size() - kQuoted), "'");
}

bool word_char(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); }

}  // namespace

absl::StatusOr<JudgeLabels> parse_judge_labels(absl::string_view spec) {
  JudgeLabels labels;
  for (absl::string_view entry : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    const size_t eq = entry.rfind('=');
    const absl::string_view label =
        absl::StripAsciiWhitespace(eq == absl::string_view::npos ? entry : entry.substr(0, eq));
    double value = 0;
    const bool number = eq != absl::string_view::npos &&
                        absl::SimpleAtod(absl::StripAsciiWhitespace(entry.substr(eq + 1)), &value);
    if (label.empty() || !number || !std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "labels: the entry '", entry, "' is not LABEL=NUMBER (e.g. \"yes=1, no=0\")"));
    }
    for (char c : label) {
      if (absl::ascii_isspace(static_cast<unsigned char>(c)) || c == '=') {
        return absl::InvalidArgumentError(
            absl::StrCat("labels: the label '", label, "' holds a space or '='"));
      }
    }
    for (const auto& [known, unused] : labels) {
      if (absl::EqualsIgnoreCase(known, label)) {
        return absl::InvalidArgumentError(
            absl::StrCat("labels: the label '", label, "' is given twice"));
      }
    }
    labels.emplace_back(std::string(label), value);
  }
  if (labels.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels: '", spec, "' names ", labels.size(),
                     " label(s); a verdict needs at least two (e.g. \"yes=1, no=0\")"));
  }
  return labels;
}

absl::StatusOr<double> label_verdict(absl::string_view output, const JudgeLabels& labels) {
  const std::string lower = absl::AsciiStrToLower(output);
  size_t best_at = 0;
  const std::pair<std::string, double>* best = nullptr;
  for (const auto& entry : labels) {
    const std::string label = absl::AsciiStrToLower(entry.first);
    for (size_t at = lower.rfind(label); at != std::string::npos;
         at = at == 0 ? std::string::npos : lower.rfind(label, at - 1)) {
      const size_t end = at + label.size();
      const bool alone =
          (at == 0 || !word_char(lower[at - 1])) && (end == lower.size() || !word_char(lower[end]));
      if (!alone) continue;
      if (best == nullptr || at > best_at) {
        best = &entry;
        best_at = at;
      }
      break;  // the last standing occurrence of this label
    }
  }
  if (best == nullptr) {
    std::string names;
    for (const auto& [label, unused] : labels)
      absl::StrAppend(&names, names.empty() ? "" : ", ", label);
    return absl::InvalidArgumentError(
        absl::StrCat("the judge's output ", quoted(output), " holds none of the labels ", names));
  }
  return best->second;
}

namespace {

// The number ending at `end` (an index just past a digit): [-+]digits[.digits]; its start.
size_t number_start(absl::string_view output, size_t end) {
  size_t begin = end;
  bool point = false;
  while (begin > 0) {
    const char c = output[begin - 1];
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      --begin;
    } else if (c == '.' && !point && begin > 1 &&
               absl::ascii_isdigit(static_cast<unsigned char>(output[begin - 2]))) {
      point = true;
      --begin;
    } else {
      break;
    }
  }
  if (begin > 0 && (output[begin - 1] == '-' || output[begin - 1] == '+')) --begin;
  return begin;
}

}  // namespace

absl::StatusOr<double> score_verdict(absl::string_view output, double low, double high) {
  size_t end = output.size();
  while (end > 0 && !absl::ascii_isdigit(static_cast<unsigned char>(output[end - 1]))) --end;
  if (end == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the judge's output ", quoted(output), " holds no number"));
  }
  size_t begin = number_start(output, end);
  // "8/10": a rating over its scale reads the rating.
  if (begin > 1 && output[begin - 1] == '/' &&
      absl::ascii_isdigit(static_cast<unsigned char>(output[begin - 2]))) {
    end = begin - 1;
    begin = number_start(output, end);
  }
  double value = 0;
  if (!absl::SimpleAtod(output.substr(begin, end - begin), &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the judge's output ", quoted(output), " holds no readable number"));
  }
  if (value < low || value > high) {
    return absl::InvalidArgumentError(absl::StrCat("the judge's verdict ", value, " (output ",
                                                   quoted(output), ") is outside [", low, ", ",
                                                   high, "] (score_min, score_max)"));
  }
  return value;
}

double yes_probability(double logprob_yes, double logprob_no) {
  // P(yes) / (P(yes) + P(no)) = sigmoid(logprob_yes - logprob_no).
  const double d = logprob_yes - logprob_no;
  if (std::isnan(d)) return 0.5;  // both -inf: neither token is possible
  return d >= 0 ? 1.0 / (1.0 + std::exp(-d)) : std::exp(d) / (1.0 + std::exp(d));
}

}  // namespace flywheel::rollout
