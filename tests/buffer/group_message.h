// Test helper: TrajectoryGroup <-> the generated flywheel.v1 message, element by element, as a
// client with protobuf's generated classes would build it (the reference wire_codec is
// checked against, and the way the service tests speak to the server without flywheel's codec).
#pragma once

#include <string>

#include "flywheel/buffer/trajectory.h"
#include "flywheel/v1/trajectory.pb.h"

namespace flywheel::buffer {

inline v1::TrajectoryGroup to_message(const TrajectoryGroup& g, const std::string& worker_id = "") {
  v1::TrajectoryGroup p;
  p.set_group_id(g.group_id);
  p.set_lease_id(g.lease_id);
  p.set_worker_id(worker_id);
  for (const Trajectory& t : g.trajectories) {
    v1::Trajectory* tp = p.add_trajectories();
    for (int32_t id : t.prompt_ids) tp->add_prompt_ids(static_cast<uint32_t>(id));
    for (int32_t id : t.response_ids) tp->add_response_ids(static_cast<uint32_t>(id));
    tp->set_loss_mask(std::string(t.loss_mask.begin(), t.loss_mask.end()));
    for (float lp : t.logprobs) tp->add_logprobs(lp);
    for (int32_t v : t.versions) tp->add_versions(static_cast<uint32_t>(v));
    tp->set_reward(t.reward);
    for (const auto& [k, v] : t.reward_breakdown) (*tp->mutable_reward_breakdown())[k] = v;
    tp->set_finish_reason(t.finish_reason);
    tp->set_sample_index(t.sample_index);
    for (int32_t e : t.turn_ends) tp->add_turn_ends(static_cast<uint32_t>(e));
    for (double r : t.turn_rewards) tp->add_turn_rewards(r);
    tp->set_tool_calls(t.tool_calls);
    for (float s : t.env_step_seconds) tp->add_env_step_seconds(s);
    tp->set_segment(t.segment);
    for (int32_t end : t.step_ends) tp->add_step_ends(static_cast<uint32_t>(end));
    for (double r : t.step_rewards) tp->add_step_rewards(r);
    tp->set_routes(std::string(t.routes.begin(), t.routes.end()));
    tp->set_route_layers(t.route_layers);
    tp->set_route_k(t.route_k);
    tp->set_route_bytes(t.route_bytes);
  }
  if (g.has_baseline) p.set_baseline_reward(g.baseline_reward);
  if (g.prompt_index != -1) p.set_prompt_index(g.prompt_index);
  p.set_env_errors(g.env_errors);
  return p;
}

inline TrajectoryGroup from_message(const v1::TrajectoryGroup& p) {
  TrajectoryGroup g;
  g.group_id = p.group_id();
  g.lease_id = p.lease_id();
  g.worker_id = p.worker_id();
  g.prompt_index = p.has_prompt_index() ? p.prompt_index() : -1;
  for (const v1::Trajectory& tp : p.trajectories()) {
    Trajectory t;
    for (uint32_t id : tp.prompt_ids()) t.prompt_ids.push_back(static_cast<int32_t>(id));
    for (uint32_t id : tp.response_ids()) t.response_ids.push_back(static_cast<int32_t>(id));
    t.loss_mask.assign(tp.loss_mask().begin(), tp.loss_mask().end());
    for (float lp : tp.logprobs()) t.logprobs.push_back(lp);
    for (uint32_t v : tp.versions()) t.versions.push_back(static_cast<int32_t>(v));
    t.reward = tp.reward();
    for (const auto& [k, v] : tp.reward_breakdown()) t.reward_breakdown[k] = v;
    t.finish_reason = tp.finish_reason();
    t.sample_index = tp.sample_index();
    for (uint32_t e : tp.turn_ends()) t.turn_ends.push_back(static_cast<int32_t>(e));
    for (double r : tp.turn_rewards()) t.turn_rewards.push_back(r);
    t.tool_calls = tp.tool_calls();
    for (float s : tp.env_step_seconds()) t.env_step_seconds.push_back(s);
    t.segment = tp.segment();
    for (uint32_t end : tp.step_ends()) t.step_ends.push_back(static_cast<int32_t>(end));
    for (double r : tp.step_rewards()) t.step_rewards.push_back(r);
    t.routes.assign(tp.routes().begin(), tp.routes().end());
    t.route_layers = tp.route_layers();
    t.route_k = tp.route_k();
    t.route_bytes = tp.route_bytes();
    g.trajectories.push_back(std::move(t));
  }
  g.env_errors = p.env_errors();
  g.has_baseline = p.has_baseline_reward();
  g.baseline_reward = p.baseline_reward();
  return g;
}

}  // namespace flywheel::buffer
