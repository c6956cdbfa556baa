#include "flywheel/algos/dapo.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "flywheel/core/overlong.h"

namespace flywheel::algos {
namespace {

class NonzeroRewardStd : public GroupFilter {
 public:
  bool keep(const std::vector<double>& rewards) const override {
    if (rewards.size() == 1) return true;
    if (rewards.empty()) return false;
    double mean = 0;
    for (double r : rewards) mean += r;
    mean /= rewards.size();
    double var = 0;
    for (double r : rewards) var += (r - mean) * (r - mean);
    return var / rewards.size() > 0;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<GroupFilter>> make_nonzero_reward_std(const GroupFilterParams& p) {
  if (!p.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("nonzero_reward_std takes no parameters, got '", p.begin()->first, "'"));
  }
  return std::unique_ptr<GroupFilter>(new NonzeroRewardStd());
}

double overlong_penalty(int64_t length, int64_t max_len, int64_t buffer_len, double factor) {
  return core::overlong_penalty(length, max_len, buffer_len, factor);  // one implementation
}

}  // namespace flywheel::algos
