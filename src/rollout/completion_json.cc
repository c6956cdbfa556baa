#include "flywheel/rollout/completion_json.h"

#include <string>

#include "flywheel/model/tokenizer/tokenizer.h"

namespace flywheel::rollout {

core::Json completion_json(const Sample& sample, const Episode* episode,
                           const model::Tokenizer* tokenizer) {
  using core::Json;
  Json c = Json::object();
  if (tokenizer != nullptr) {
    absl::StatusOr<std::string> text = tokenizer->decode(sample.token_ids);
    if (text.ok()) {
      c.set("text", Json(*text));
    } else {
      c.set("text_error", Json(std::string(text.status().message())));
    }
  }
  Json ids = Json::array(), logprobs = Json::array(), versions = Json::array();
  for (size_t k = 0; k < sample.token_ids.size(); ++k) {
    ids.push_back(Json(sample.token_ids[k]));
    logprobs.push_back(Json(static_cast<double>(sample.logprobs[k])));
    versions.push_back(Json(sample.versions[k]));
  }
  c.set("ids", std::move(ids));
  c.set("logprobs", std::move(logprobs));
  c.set("versions", std::move(versions));
  if (episode != nullptr) {
    // A token's turn: the model turn it belongs to, or (the environment's) the turn it answers.
    Json sources = Json::array(), turns = Json::array(), rewards = Json::array();
    size_t turn = 0;
    for (size_t k = 0; k < sample.token_ids.size(); ++k) {
      const bool model = k < sample.from_model.size() && sample.from_model[k] != 0;
      if (model && turn < episode->turn_ends.size() &&
          k >= static_cast<size_t>(episode->turn_ends[turn])) {
        ++turn;  // the first token of the next model turn
      }
      sources.push_back(Json(model ? "model" : "environment"));
      turns.push_back(Json(static_cast<int64_t>(turn)));
    }
    for (double r : episode->turn_rewards) rewards.push_back(Json(r));
    c.set("sources", std::move(sources));
    c.set("turns", std::move(turns));
    c.set("turn_rewards", std::move(rewards));
    c.set("tool_calls", Json(episode->tool_calls));
  }
  c.set("finish_reason", Json(finish_reason_name(sample.finish_reason)));
  if (!sample.error.empty()) c.set("error", Json(sample.error));
  return c;
}

}  // namespace flywheel::rollout
