// Helpers for reward tests: records from JSON text and inputs pointing into them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/core/json.h"
#include "flywheel/rewards/reward_function.h"
#include "flywheel/rewards/scoring_pool.h"

namespace flywheel::rewards::testing {

inline RewardSpec spec(std::string name, std::map<std::string, std::string> params = {},
                       int64_t max_new_tokens = 0) {
  RewardSpec s;
  s.name = std::move(name);
  s.params = std::move(params);
  s.max_new_tokens = max_new_tokens;
  return s;
}

inline std::shared_ptr<const core::Json> record(const std::string& json) {
  return std::make_shared<const core::Json>(*core::Json::parse(json));
}

inline OwnedSample sample(const std::string& record_json, std::string completion,
                          std::vector<int32_t> ids = {}) {
  OwnedSample s;
  s.record = record(record_json);
  s.record_name = "record 1";
  s.completion = std::move(completion);
  s.completion_ids = std::move(ids);
  return s;
}

}  // namespace flywheel::rewards::testing
