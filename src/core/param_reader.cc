#include "flywheel/core/param_reader.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/core/registry.h"

namespace flywheel::core {

void ParamReader::fail(const std::string& key, const std::string& problem) {
  if (error_.ok()) {
    error_ = absl::InvalidArgumentError(absl::StrCat(owner_, ": option '", key, "' ", problem));
  }
}

const std::string* ParamReader::lookup(const std::string& key) {
  read_.insert(key);
  auto it = params_.find(key);
  return it == params_.end() ? nullptr : &it->second;
}

std::string ParamReader::string(const std::string& key, const std::string& fallback) {
  const std::string* v = lookup(key);
  return v ? *v : fallback;
}

std::string ParamReader::choice(const std::string& key, const std::string& fallback,
                                const std::vector<std::string>& allowed) {
  std::string v = string(key, fallback);
  for (const std::string& a : allowed) {
    if (v == a) return v;
  }
  fail(key, absl::StrCat("is '", v, "'; must be one of ", absl::StrJoin(allowed, ", ")));
  return fallback;
}

double ParamReader::number(const std::string& key, double fallback) {
  const std::string* v = lookup(key);
  if (!v) return fallback;
  double out = 0;
  if (!absl::SimpleAtod(*v, &out) || !std::isfinite(out)) {
    fail(key, absl::StrCat("is '", *v, "'; must be a finite number"));
    return fallback;
  }
  return out;
}

double ParamReader::number_in(const std::string& key, double fallback, double lo, double hi) {
  double v = number(key, fallback);
  if (v < lo || v > hi) {
    fail(key, absl::StrCat("is ", v, "; must be in [", lo, ", ", hi, "]"));
    return fallback;
  }
  return v;
}

int64_t ParamReader::integer(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
  const std::string* v = lookup(key);
  if (!v) return fallback;
  int64_t out = 0;
  if (!absl::SimpleAtoi(*v, &out)) {
    fail(key, absl::StrCat("is '", *v, "'; must be an integer"));
    return fallback;
  }
  if (out < lo || out > hi) {
    fail(key, absl::StrCat("is ", out, "; must be in [", lo, ", ", hi, "]"));
    return fallback;
  }
  return out;
}

bool ParamReader::boolean(const std::string& key, bool fallback) {
  const std::string* v = lookup(key);
  if (!v) return fallback;
  const std::string s = absl::AsciiStrToLower(*v);
  if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
  if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  fail(key, absl::StrCat("is '", *v, "'; must be true or false"));
  return fallback;
}

absl::Status ParamReader::finish() const {
  if (!error_.ok()) return error_;
  std::vector<std::string> known(read_.begin(), read_.end());
  for (const auto& [key, value] : params_) {
    if (read_.count(key)) continue;
    return absl::InvalidArgumentError(
        absl::StrCat(owner_, ": ", unknown_name_error("option", key, known).message()));
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
