#include "proto_convert.h"

#include <algorithm>
#include <limits>

namespace flywheel::buffer {
namespace {

// Wire ids and versions are fixed32; values outside [0, 2^32) cannot be represented and are
// sent as 0xFFFFFFFF, which validation then rejects (ids) or treats as from the future.
uint32_t narrow(int64_t v) {
  return v < 0 || v > std::numeric_limits<uint32_t>::max() ? std::numeric_limits<uint32_t>::max()
                                                           : static_cast<uint32_t>(v);
}

template <typename Field>
std::vector<int64_t> widen(const Field& field) {
  return std::vector<int64_t>(field.begin(), field.end());
}

template <typename Field>
void fill(const std::vector<int64_t>& values, Field* field) {
  field->Reserve(static_cast<int>(values.size()));
  for (int64_t v : values) field->AddAlreadyReserved(narrow(v));
}

}  // namespace

TrajectoryGroup from_proto(const v1::TrajectoryGroup& p) {
  TrajectoryGroup g;
  g.group_id = p.group_id();
  g.lease_id = p.lease_id();
  g.worker_id = p.worker_id();
  g.trajectories.reserve(p.trajectories_size());
  for (const v1::Trajectory& tp : p.trajectories()) {
    Trajectory t;
    t.prompt_ids = widen(tp.prompt_ids());
    t.response_ids = widen(tp.response_ids());
    t.loss_mask.assign(tp.loss_mask().begin(), tp.loss_mask().end());
    t.logprobs.assign(tp.logprobs().begin(), tp.logprobs().end());
    t.versions = widen(tp.versions());
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
    fill(t.prompt_ids, tp->mutable_prompt_ids());
    fill(t.response_ids, tp->mutable_response_ids());
    tp->set_loss_mask(std::string(t.loss_mask.begin(), t.loss_mask.end()));
    tp->mutable_logprobs()->Add(t.logprobs.begin(), t.logprobs.end());
    fill(t.versions, tp->mutable_versions());
    tp->set_reward(t.reward);
    for (const auto& [k, v] : t.reward_breakdown) (*tp->mutable_reward_breakdown())[k] = v;
    tp->set_finish_reason(t.finish_reason);
    tp->set_sample_index(t.sample_index);
  }
}

}  // namespace flywheel::buffer
