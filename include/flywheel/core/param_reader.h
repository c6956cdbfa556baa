// Strict, typed reading of a plugin's `params` (strings from YAML: a reward function's, an
// environment's). Values are read with defaults; the first bad value and any key that was never
// read are errors naming the owner and the key (with a suggestion for a misspelt one), like the
// rest of the config.
//
//   ParamReader r("environment 'calculator'", spec.params);
//   options.max_chars = r.integer("max_expression_chars", 200, 1, 4096);
//   FLYWHEEL_RETURN_IF_ERROR(r.finish());
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace flywheel::core {

class ParamReader {
 public:
  // `owner` starts every error ("reward 'math'").
  ParamReader(std::string owner, std::map<std::string, std::string> params)
      : owner_(std::move(owner)), params_(std::move(params)) {}

  std::string string(const std::string& key, const std::string& fallback);
  // One of `allowed`.
  std::string choice(const std::string& key, const std::string& fallback,
                     const std::vector<std::string>& allowed);
  double number(const std::string& key, double fallback);
  // A number within [lo, hi].
  double number_in(const std::string& key, double fallback, double lo, double hi);
  int64_t integer(const std::string& key, int64_t fallback, int64_t lo, int64_t hi);
  bool boolean(const std::string& key, bool fallback);  // true/false/yes/no/1/0
  bool has(const std::string& key) const { return params_.count(key) > 0; }

  // The first error seen, else an error for any key not read ("unknown option").
  absl::Status finish() const;

 private:
  void fail(const std::string& key, const std::string& problem);
  const std::string* lookup(const std::string& key);

  std::string owner_;
  std::map<std::string, std::string> params_;
  std::set<std::string> read_;
  absl::Status error_;
};

}  // namespace flywheel::core
