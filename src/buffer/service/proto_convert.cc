#include "proto_convert.h"

namespace flywheel::buffer {

TrajectoryGroup from_proto(const v1::TrajectoryGroup& p) {
  TrajectoryGroup g;
  g.group_id = p.group_id();
  g.lease_id = p.lease_id();
  g.worker_id = p.worker_id();
  for (const v1::Trajectory& tp : p.trajectories()) {
    Trajectory t;
    t.prompt_ids.assign(tp.prompt_ids().begin(), tp.prompt_ids().end());
    t.response_ids.assign(tp.response_ids().begin(), tp.response_ids().end());
    for (uint32_t m : tp.loss_mask()) t.loss_mask.push_back(static_cast<uint8_t>(m > 1 ? 2 : m));
    t.logprobs.assign(tp.logprobs().begin(), tp.logprobs().end());
    t.versions.assign(tp.versions().begin(), tp.versions().end());
    t.reward = tp.reward();
    for (const auto& [k, v] : tp.reward_breakdown()) t.reward_breakdown[k] = v;
    t.finish_reason = tp.finish_reason();
    t.sample_index = tp.sample_index();
    g.trajectories.push_back(std::move(t));
  }
  return g;
}

void to_proto(const TrajectoryGroup& g, v1::TrajectoryGroup* p) {
  p->set_group_id(g.group_id);
  p->set_lease_id(g.lease_id);
  p->set_worker_id(g.worker_id);
  for (const Trajectory& t : g.trajectories) {
    v1::Trajectory* tp = p->add_trajectories();
    *tp->mutable_prompt_ids() = {t.prompt_ids.begin(), t.prompt_ids.end()};
    *tp->mutable_response_ids() = {t.response_ids.begin(), t.response_ids.end()};
    for (uint8_t m : t.loss_mask) tp->add_loss_mask(m);
    *tp->mutable_logprobs() = {t.logprobs.begin(), t.logprobs.end()};
    *tp->mutable_versions() = {t.versions.begin(), t.versions.end()};
    tp->set_reward(t.reward);
    for (const auto& [k, v] : t.reward_breakdown) (*tp->mutable_reward_breakdown())[k] = v;
    tp->set_finish_reason(t.finish_reason);
    tp->set_sample_index(t.sample_index);
  }
}

}  // namespace flywheel::buffer
