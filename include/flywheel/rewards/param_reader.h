// Strict, typed reading of a reward function's `params` (strings from YAML). Values are read
// with defaults; the first bad value and any key that was never read are errors naming the
// function and the key (with a suggestion for a misspelt one), like the rest of the config.
//
//   ParamReader r(spec);
//   options.tolerance = r.number("tolerance", 1e-6);
//   options.fallback_to_last_number = r.boolean("fallback_to_last_number", false);
//   FLYWHEEL_RETURN_IF_ERROR(r.finish());
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/rewards/reward_function.h"

namespace flywheel::rewards {

class ParamReader {
 public:
  explicit ParamReader(const RewardSpec& spec) : name_(spec.name), params_(spec.params) {}
  ParamReader(std::string function, std::map<std::string, std::string> params)
      : name_(std::move(function)), params_(std::move(params)) {}

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

  std::string name_;
  std::map<std::string, std::string> params_;
  std::set<std::string> read_;
  absl::Status error_;
};

}  // namespace flywheel::rewards
