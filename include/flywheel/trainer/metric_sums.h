// Metrics accumulated over micro-batches and updates, then reduced over ranks: sums, weighted
// means, minima and maxima by name. Ranks may hold different names (a rank with no tokens
// reports no ratio); reduce() agrees on the union first.
#pragma once

#include <map>
#include <string>

#include "flywheel/comm/communicator.h"

namespace flywheel::trainer {

class MetricSums {
 public:
  void add_sum(const std::string& name, double value) { sums_[name] += value; }
  // Contributes to the mean of `name` weighted by `weight` (e.g. valid tokens).
  void add_mean(const std::string& name, double value, double weight);
  void add_min(const std::string& name, double value);
  void add_max(const std::string& name, double value);
  // By the name's suffix: `*_min` a minimum, `*_max` a maximum, anything else a weighted mean
  // (the convention of the algorithms' diagnostics).
  void add_diagnostic(const std::string& name, double value, double weight);

  // Over every rank: sums, weighted means (0 when no rank had weight), minima and maxima, by
  // name. Collective.
  std::map<std::string, double> reduce(comm::Communicator& comm) const;

 private:
  std::map<std::string, double> sums_;
  std::map<std::string, std::pair<double, double>> means_;  // weighted sum, weight
  std::map<std::string, double> mins_, maxs_;
};

}  // namespace flywheel::trainer
