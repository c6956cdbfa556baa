#include "flywheel/trainer/learner.h"

#include <cmath>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/algos/actor_loss.h"
#include "flywheel/algos/dapo.h"
#include "flywheel/algos/turn_credit.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/trainer/metric_sums.h"
#include "flywheel/trainer/micro_batch.h"

namespace flywheel::trainer {

// The step's sequences: the whole batch (every rank the same) and this rank's rows.
struct Learner::Batch {
  int64_t max_response = 0;
  std::vector<const buffer::Trajectory*> sequences;  // whole batch, group by group
  at::Tensor mask, scores, group_ids;                // [S, R], [S], [S]
  at::Tensor turn_credit;     // [S, R] episodes' per-turn rewards on tokens; undefined: none
  at::Tensor reward_ends;     // [S, R] 1 where turn_credit pays a turn's or step's reward
  at::Tensor turn_discounts;  // [S, R] environment.turn_discount at turn ends; undefined: none
  std::vector<int64_t> mine;  // this rank's sequences (local rows)
  std::vector<std::vector<int64_t>> mini;  // local rows of each mini-batch
  // Per-token tensors of the local rows [S_local, R].
  // equal_version: 1 where the token and every earlier one of its response were sampled at the
  // learner's current version: the keys and values it read in the engine were that version's
  // too (a weight update mid-sequence leaves the earlier tokens' in the engine's cache).
  at::Tensor local_mask, behaviour, equal_version, old_logprobs, ref_logprobs, values, advantages,
      returns, is_weights;
  // Whole-batch tensors [S, R]: advantages; proximal and reference log-probs (KL in the reward).
  at::Tensor all_advantages, old_all, ref_all;
};

namespace {

// The micro-batches of `rows` (local rows; `mine` maps them to sequences of the batch).
absl::StatusOr<BalancedMicroBatches> pack_rows(
    const std::vector<const buffer::Trajectory*>& sequences, const std::vector<int64_t>& mine,
    const std::vector<int64_t>& rows, const PackOptions& options, comm::Communicator& comm) {
  std::vector<SequenceTokens> tokens;
  for (int64_t row : rows) {
    const buffer::Trajectory* t = sequences[mine[row]];
    tokens.push_back({&t->prompt_ids, &t->response_ids, t});
  }
  return pack_balanced(tokens, rows, options, comm);
}

// [S_local, R] -> [S, R] over every rank (rows of other ranks' sequences filled in), in batch
// order. `mine` are this rank's sequence indices.
at::Tensor gather_rows(const at::Tensor& local, const std::vector<int64_t>& mine, int64_t total,
                       comm::Communicator& comm) {
  const int64_t R = local.size(1);
  at::Tensor count = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
  comm.all_reduce_host(count, comm::ReduceOp::kMax);
  const int64_t most = count.item<int64_t>();
  at::Tensor padded = at::zeros({most, R + 1}, at::kFloat);  // column R: sequence index + 1
  for (size_t i = 0; i < mine.size(); ++i) {
    padded[i].narrow(0, 0, R).copy_(local[i]);
    padded[i][R] = static_cast<float>(mine[i] + 1);
  }
  at::Tensor all = at::empty({most * comm.size() * (R + 1)}, at::kFloat);
  comm.all_gather_host(padded.reshape({-1}), all);
  all = all.view({most * comm.size(), R + 1});
  at::Tensor out = at::zeros({total, R}, at::kFloat);
  for (int64_t i = 0; i < all.size(0); ++i) {
    const int64_t s = static_cast<int64_t>(all[i][R].item<float>()) - 1;
    if (s >= 0) out[s].copy_(all[i].narrow(0, 0, R));
  }
  return out;
}

bool is_additive(const std::string& name) {
  return name == "pg_loss" || name == "kl_loss" || name == "entropy" || name == "vf_loss";
}

}  // namespace

Learner::Learner(const LearnerOptions& options, algos::Algorithm algorithm,
                 comm::Communicator* comm)
    : options_(options), algorithm_(std::move(algorithm)), comm_(comm) {}

double Learner::kl_beta() const {
  return kl_controller_ ? kl_controller_->beta() : options_.kl_coef;
}

void Learner::set_kl_beta(double beta) {
  if (kl_controller_) {
    kl_controller_.emplace(beta, options_.kl_target, options_.kl_horizon);
  }
}

at::Tensor Learner::infer(ShardedDecoder& model, const Batch& batch, bool values) {
  at::NoGradGuard no_grad;
  std::vector<int64_t> all(batch.mine.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  // Packing succeeded for these rows in step() already.
  BalancedMicroBatches packed = *pack_rows(batch.sequences, batch.mine, all,
                                           options_.pack_options(batch.max_response), *comm_);
  at::Tensor out = at::zeros({static_cast<int64_t>(batch.mine.size()), batch.max_response});
  HeadOptions head;
  head.temperature = options_.temperature;
  head.chunk_size = options_.logprob_chunk;
  head.engine_kernels = !values && options_.exact_logprobs;
  for (const MicroBatch& mb : packed.micro_batches) {
    TokenOutputs o = model.forward(mb.batch, head);
    if (mb.sequences.empty()) continue;
    out.index_copy_(0, packed.rows_of(mb), unpack(mb, values ? o.values : o.logprobs).cpu());
  }
  return out;
}

absl::Status Learner::update(const Batch& batch, bool critic, Metrics* metrics) {
  ShardedDecoder& model = critic ? *critic_ : *policy_;
  ShardedAdamW& optimizer = critic ? *critic_optimizer_ : *optimizer_;
  const double lr = critic ? critic_schedule_->at(version_) : schedule_->at(version_);
  const std::string prefix = critic ? "critic/" : "actor/";
  const bool precomputed_old = batch.old_logprobs.defined();
  MetricSums sums;
  int64_t updates = 0, skipped = 0;
  HeadOptions head;
  head.temperature = options_.temperature;
  head.chunk_size = options_.logprob_chunk;
  head.with_entropy = !critic;
  for (int64_t epoch = 0; epoch < options_.ppo_epochs; ++epoch) {
    for (const std::vector<int64_t>& rows : batch.mini) {
      // Denominators of this update: over its sequences on every rank.
      at::Tensor row_index = at::tensor(rows, at::kLong);
      const algos::AggCounts local =
          algos::local_counts(batch.local_mask.index_select(0, row_index));
      at::Tensor counts = at::tensor({local.tokens, local.sequences, local.rows}, at::kDouble);
      comm_->all_reduce_host(counts, comm::ReduceOp::kSum);
      algos::AggCounts global{counts[0].item<double>(), counts[1].item<double>(),
                              counts[2].item<double>()};
      FLYWHEEL_ASSIGN_OR_RETURN(BalancedMicroBatches packed,
                                pack_rows(batch.sequences, batch.mine, rows,
                                          options_.pack_options(batch.max_response), *comm_));
      double loss_sum = 0;
      sums.add_mean(prefix + "micro_batches", static_cast<double>(packed.micro_batches.size()), 1);
      double positions = 0, unshared = 0;
      for (const MicroBatch& mb : packed.micro_batches) {
        positions += static_cast<double>(mb.tokens);
        unshared += static_cast<double>(mb.unshared_tokens);
      }
      sums.add_mean(prefix + "positions_saved", 1 - positions / std::max(unshared, 1.0), 1);
      for (const MicroBatch& mb : packed.micro_batches) {
        TokenOutputs out = model.forward(mb.batch, head);
        at::Tensor loss;
        if (mb.sequences.empty()) {  // no sequence: only the collectives of its backward
          loss = (critic ? out.values : out.logprobs).sum() * 0;
        } else {
          at::Tensor r = packed.rows_of(mb);
          // This micro-batch's rows of the step's per-token tensors, on the model's device.
          auto rows_of = [&](const at::Tensor& t) {
            return t.index_select(0, r).to(model.options().device);
          };
          at::Tensor mask = rows_of(batch.local_mask);
          const double tokens = mask.sum().item<double>();
          algos::LossResult result;
          if (critic) {
            algos::ValueLossInput in;
            in.values = unpack(mb, out.values);
            in.old_values = rows_of(batch.values);
            in.returns = rows_of(batch.returns);
            in.mask = mask;
            in.clip = options_.value_clip;
            in.agg = algorithm_.agg;
            in.counts = global;
            in.norm_constant = algorithm_.norm_constant;
            result = algos::value_loss(in);
          } else {
            at::Tensor lp = unpack(mb, out.logprobs);
            algos::ActorLossInput in;
            in.policy.logprobs = lp;
            in.policy.old_logprobs = precomputed_old ? rows_of(batch.old_logprobs) : lp.detach();
            in.policy.advantages = rows_of(batch.advantages);
            in.policy.mask = mask;
            in.policy.agg = algorithm_.agg;
            in.policy.counts = global;
            in.policy.norm_constant = algorithm_.norm_constant;
            if (precomputed_old) {
              if (batch.is_weights.defined()) {
                in.policy.is_weights = rows_of(batch.is_weights);
              }
            } else {
              absl::StatusOr<algos::IsResult> is =
                  algorithm_.is_correction->compute({lp.detach(), rows_of(batch.behaviour), mask});
              if (!is.ok()) return is.status();
              in.policy.is_weights = is->weights;
              for (const auto& [name, value] : is->diagnostics) {
                sums.add_diagnostic("rollout_corr/" + name, value, tokens);
              }
            }
            in.entropy = unpack(mb, out.entropy);
            in.entropy_coef = options_.entropy_coef;
            if (reference_ && !options_.kl_in_reward) {
              in.ref_logprobs = rows_of(batch.ref_logprobs);
              in.kl_coef = options_.kl_coef;
              in.kl_estimator = algorithm_.kl_estimator;
            }
            FLYWHEEL_ASSIGN_OR_RETURN(algos::LossResult computed,
                                      algos::actor_loss(*algorithm_.policy_loss, in));
            result = std::move(computed);
          }
          loss = result.loss;
          if (out.aux_loss.defined()) {
            // The mixture of experts' load-balancing loss of this micro-batch, weighted by its
            // share of the update's tokens on every rank (transformers adds it per batch).
            const double share = tokens / std::max(1.0, global.tokens);
            loss = loss + model.config().router_aux_loss_coef * share * out.aux_loss;
            sums.add_sum(prefix + "aux_loss", share * out.aux_loss.item<double>() /
                                                  options_.ppo_epochs / batch.mini.size());
          }
          for (const auto& [name, value] : result.diagnostics) {
            if (is_additive(name)) continue;  // summed below from the loss parts
            sums.add_diagnostic(prefix + name, value, tokens);
          }
          for (const auto& [name, value] : result.diagnostics) {
            if (is_additive(name))
              sums.add_sum(prefix + name, value / options_.ppo_epochs / batch.mini.size());
          }
        }
        loss_sum += loss.item<double>();
        loss.backward();
      }
      // The update: skipped when the loss or the gradient norm is not finite on any rank.
      const ShardedAdamW::Update u = optimizer.finish_update(loss_sum, lr, options_.grad_clip);
      ++updates;
      if (u.applied) {
        sums.add_mean(prefix + "grad_norm", u.grad_norm, 1);
        consecutive_skips_ = 0;
      } else {
        ++skipped;
        ++consecutive_skips_;
      }
      if (consecutive_skips_ >= options_.max_consecutive_skips) {
        return absl::FailedPreconditionError(absl::StrCat(
            consecutive_skips_, " consecutive ", critic ? "critic" : "policy",
            " updates had a non-finite loss or gradient norm (last: loss ", u.loss, ", grad norm ",
            u.grad_norm, "); stopping (trainer.max_consecutive_skips)"));
      }
    }
  }
  for (const auto& [name, value] : sums.reduce(*comm_)) (*metrics)[name] = value;
  // Ranks hold additive parts of the same terms: reduce() summed them.
  (*metrics)[prefix + "lr"] = lr;
  (*metrics)[prefix + "skipped_updates"] = static_cast<double>(skipped);
  (*metrics)[prefix + "updates"] = static_cast<double>(updates);
  return absl::OkStatus();
}

absl::Status Learner::prepare(const std::vector<buffer::TrajectoryGroup>& groups, Batch* out,
                              Metrics* metrics) {
  if (groups.empty()) return absl::InvalidArgumentError("learner step: empty batch");
  const int64_t G = static_cast<int64_t>(groups.size());
  if (G % options_.mini_batches != 0) {
    return absl::InvalidArgumentError(absl::StrCat("learner step: ", G,
                                                   " groups do not split into mini_batches (",
                                                   options_.mini_batches, ")"));
  }
  Batch& batch = *out;
  std::vector<int64_t> first_of_group;  // first sequence index of each group
  std::vector<int64_t> group_id;
  std::vector<int64_t> episode_id;  // a segment after an episode's first continues its episode
  bool segmented = false;
  std::vector<double> baselines;
  const bool needs_baseline = algorithm_.estimator->needs_greedy_baseline();
  for (int64_t g = 0; g < G; ++g) {
    if (needs_baseline && !groups[g].has_baseline) {
      return absl::InvalidArgumentError(
          absl::StrCat("learner step: group '", groups[g].group_id,
                       "' has no baseline_reward, which the advantage estimator needs"));
    }
    first_of_group.push_back(static_cast<int64_t>(batch.sequences.size()));
    for (const buffer::Trajectory& t : groups[g].trajectories) {
      batch.sequences.push_back(&t);
      group_id.push_back(g);
      segmented = segmented || t.segment != 0;
      const int64_t previous = episode_id.empty() ? -1 : episode_id.back();
      episode_id.push_back(t.segment == 0 ? previous + 1 : previous);
      if (needs_baseline) baselines.push_back(groups[g].baseline_reward);
      batch.max_response = std::max<int64_t>(batch.max_response, t.response_ids.size());
    }
  }
  first_of_group.push_back(static_cast<int64_t>(batch.sequences.size()));
  const int64_t S = static_cast<int64_t>(batch.sequences.size()), R = batch.max_response;
  if (R == 0) return absl::InvalidArgumentError("learner step: every response is empty");
  // Per-token inputs filled in plain memory, then moved into tensors in one copy each.
  std::vector<float> mask(S * R, 0.0f), behaviour(S * R, 0.0f), equal_version(S * R, 0.0f);
  std::vector<double> raw(S), scores(S), penalties(S);
  for (int64_t s = 0; s < S; ++s) {
    const buffer::Trajectory& t = *batch.sequences[s];
    const int64_t n = t.response_ids.size();
    // A continued episode's prompt holds earlier segments' tokens, of versions not recorded here.
    bool same_so_far = t.segment == 0;
    for (int64_t j = 0; j < n; ++j) {
      mask[s * R + j] = static_cast<float>(t.loss_mask[j]);
      behaviour[s * R + j] = t.logprobs[j];
      same_so_far = same_so_far && t.versions[j] == version_;
      equal_version[s * R + j] = same_so_far ? 1.0f : 0.0f;
    }
    // DAPO's soft overlong punishment (ALGORITHMS.md §5.2), on the score before advantages.
    raw[s] = t.reward;
    penalties[s] =
        options_.overlong_buffer_len > 0
            ? algos::overlong_penalty(n, options_.max_response_tokens, options_.overlong_buffer_len,
                                      options_.overlong_penalty_factor)
            : 0.0;
    scores[s] = raw[s] + penalties[s];
  }
  batch.mask = at::tensor(mask, at::kFloat).view({S, R});
  batch.scores = at::tensor(scores, at::kDouble);
  // Episodes whose environment rewarded turns, and process rewards: token-level credit at the
  // turn and step ends.
  std::vector<algos::RowTurns> turns(S);
  bool any_turn_reward = false, any_turns = false;
  for (int64_t s = 0; s < S; ++s) {
    const buffer::Trajectory& t = *batch.sequences[s];
    turns[s] = {&t.turn_ends, &t.turn_rewards, &t.step_ends, &t.step_rewards};
    for (double r : t.turn_rewards) any_turn_reward = any_turn_reward || r != 0;
    any_turn_reward = any_turn_reward || !t.step_ends.empty();
    any_turns = any_turns || t.turn_ends.size() > 1;
  }
  if (any_turn_reward) {
    batch.turn_credit = algos::turn_rewards_on_tokens(batch.scores, batch.mask, turns);
    batch.reward_ends = algos::reward_ends(batch.mask, turns);
  }
  if (any_turns && options_.turn_discount != 1.0) {
    batch.turn_discounts = algos::turn_discounts(batch.mask, turns, options_.turn_discount);
  }
  batch.group_ids = at::tensor(group_id, at::kLong);
  if (options_.overlong_buffer_len > 0) {
    (*metrics)["reward/overlong_penalty/mean"] =
        at::tensor(penalties, at::kDouble).mean().item<double>();
  }
  (*metrics)["critic/score/mean"] = batch.scores.mean().item<double>();
  // This rank's rows: within each mini-batch's groups, group j goes to rank j % world.
  const int64_t per_mini = G / options_.mini_batches;
  for (int64_t m = 0; m < options_.mini_batches; ++m) {
    std::vector<int64_t> rows;
    for (int64_t j = 0; j < per_mini; ++j) {
      if (j % comm_->size() != comm_->rank()) continue;
      const int64_t g = m * per_mini + j;
      for (int64_t s = first_of_group[g]; s < first_of_group[g + 1]; ++s) {
        rows.push_back(static_cast<int64_t>(batch.mine.size()));
        batch.mine.push_back(s);
      }
    }
    batch.mini.push_back(std::move(rows));
  }
  at::Tensor mine = at::tensor(batch.mine, at::kLong);
  batch.local_mask = batch.mask.index_select(0, mine);
  batch.behaviour = at::tensor(behaviour, at::kFloat).view({S, R}).index_select(0, mine);
  batch.equal_version = at::tensor(equal_version, at::kFloat).view({S, R}).index_select(0, mine);

  // Every rank checks that its sequences pack before any model runs.
  {
    std::vector<int64_t> all(batch.mine.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    FLYWHEEL_ASSIGN_OR_RETURN(
        BalancedMicroBatches packed,
        pack_rows(batch.sequences, batch.mine, all, options_.pack_options(R), *comm_));
  }

  // 1. Proximal, reference and critic passes.
  const bool one_update = options_.ppo_epochs == 1 && options_.mini_batches == 1;
  // Exact proximal log-probs come from their own pass, also where one update would take the
  // training forward's.
  const bool exact = options_.exact_logprobs && policy_->engine_kernels_run();
  if (!one_update || options_.kl_in_reward || exact) {
    batch.old_logprobs = infer(*policy_, batch, false);
  }
  if (reference_) batch.ref_logprobs = infer(*reference_, batch, false);
  if (critic_) batch.values = infer(*critic_, batch, true);
  at::Tensor local_reverse_kl;  // on-policy distillation: log pi - log pi_teacher [S_local, R]
  if (teacher_) {
    const at::Tensor student =
        batch.old_logprobs.defined() ? batch.old_logprobs : infer(*policy_, batch, false);
    local_reverse_kl = student - infer(*teacher_, batch, false);
  }

  // 2. Advantages over the whole batch, identically on every rank.
  algos::AdvantageInput in;
  in.scores = batch.scores.to(at::kFloat);
  in.mask = batch.mask;
  in.group_ids = batch.group_ids;
  if (segmented) in.episode_ids = at::tensor(episode_id, at::kLong);
  if (needs_baseline) {
    in.baselines = at::tensor(baselines, at::kDouble).to(at::kFloat);  // [S]
    // One value per group: the mean over sequences weighs groups equally (equal sizes).
    (*metrics)["critic/baseline/mean"] = in.baselines.mean().item<double>();
  }
  if (critic_) in.values = gather_rows(batch.values, batch.mine, S, *comm_);
  at::Tensor rewards = batch.scores;  // per sequence, KL in the reward included
  if (batch.turn_credit.defined()) in.token_rewards = batch.turn_credit;
  in.reward_ends = batch.reward_ends;
  in.token_discounts = batch.turn_discounts;
  if (reference_ && options_.kl_in_reward) {
    batch.old_all = gather_rows(batch.old_logprobs, batch.mine, S, *comm_);
    batch.ref_all = gather_rows(batch.ref_logprobs, batch.mine, S, *comm_);
    const double beta = kl_beta();
    in.token_rewards = algos::kl_in_reward(in.scores, batch.mask, batch.old_all, batch.ref_all,
                                           beta, algorithm_.kl_estimator);
    if (batch.turn_credit.defined()) {  // the score moves from the last token to the turn ends
      in.token_rewards =
          in.token_rewards + batch.turn_credit - algos::scores_on_last_token(in.scores, in.mask);
    }
    at::Tensor kl =
        at::where(batch.mask.to(at::kBool),
                  algos::kl_penalty(batch.old_all, batch.ref_all, algorithm_.kl_estimator), 0);
    rewards = batch.scores - beta * kl.sum(-1).to(at::kDouble);
    at::Tensor lengths = batch.mask.sum(-1);
    at::Tensor nonempty = lengths > 0;
    const double current =
        nonempty.any().item<bool>()
            ? (kl.sum(-1).masked_select(nonempty) / lengths.masked_select(nonempty))
                  .mean()
                  .item<double>()
            : 0.0;
    (*metrics)["actor/reward_kl_penalty"] = current;
    (*metrics)["actor/reward_kl_coef"] = beta;
    if (kl_controller_) kl_controller_->update(current, static_cast<double>(S));
  }
  (*metrics)["critic/rewards/mean"] = rewards.mean().item<double>();
  FLYWHEEL_ASSIGN_OR_RETURN(algos::AdvantageResult advantages, algorithm_.estimator->compute(in));
  if (teacher_) {
    // Each sampled token's reverse KL, log pi(x_t) - log pi_teacher(x_t), lowers its advantage.
    const at::Tensor valid = batch.mask.to(at::kBool);
    const at::Tensor reverse_kl =
        at::where(valid, gather_rows(local_reverse_kl, batch.mine, S, *comm_), 0);
    advantages.advantages = advantages.advantages - options_.distill_coef * reverse_kl;
    const double tokens = std::max(1.0, valid.sum().item<double>());
    (*metrics)["distill/reverse_kl"] = reverse_kl.sum().item<double>() / tokens;
  }
  batch.all_advantages = advantages.advantages;
  batch.advantages = advantages.advantages.index_select(0, mine);
  batch.returns = advantages.returns.index_select(0, mine);
  for (const auto& [name, value] :
       algos::advantage_diagnostics(advantages.advantages, batch.mask, batch.group_ids)) {
    (*metrics)["critic/" + name] = value;
  }
  return absl::OkStatus();
}

absl::StatusOr<AdvantageTrace> Learner::advantages(
    const std::vector<buffer::TrajectoryGroup>& groups) {
  Batch batch;
  Metrics metrics;
  FLYWHEEL_RETURN_IF_ERROR(prepare(groups, &batch, &metrics));
  AdvantageTrace trace;
  trace.advantages = batch.all_advantages;
  trace.mask = batch.mask;
  trace.scores = batch.scores;
  trace.old_logprobs = batch.old_all;
  trace.ref_logprobs = batch.ref_all;
  return trace;
}

absl::StatusOr<Metrics> Learner::step(const std::vector<buffer::TrajectoryGroup>& groups) {
  Batch batch;
  Metrics metrics;
  FLYWHEEL_RETURN_IF_ERROR(prepare(groups, &batch, &metrics));

  // 3. IS weights from the proximal and behaviour log-probs (with one update per step they are
  // computed per micro-batch from the training forward).
  MetricSums is_sums;
  if (batch.old_logprobs.defined()) {
    absl::StatusOr<algos::IsResult> is =
        algorithm_.is_correction->compute({batch.old_logprobs, batch.behaviour, batch.local_mask});
    if (!is.ok()) return is.status();
    batch.is_weights = is->weights;
    const double tokens = batch.local_mask.sum().item<double>();
    for (const auto& [name, value] : is->diagnostics) {
      is_sums.add_diagnostic("rollout_corr/" + name, value, tokens);
    }
    // The engine/learner mismatch alone: tokens computed at this version in the engine, keys and
    // values included (no staleness in it).
    const at::Tensor same = (batch.local_mask * batch.equal_version).to(at::kBool);
    const double same_tokens = same.sum().item<double>();
    is_sums.add_mean("rollout_corr/equal_version_fraction", same_tokens / std::max(tokens, 1.0),
                     tokens);
    if (same_tokens > 0) {
      const at::Tensor diff = (batch.old_logprobs - batch.behaviour).abs().masked_select(same);
      is_sums.add_max("rollout_corr/logprob_abs_diff_equal_version_max", diff.max().item<double>());
      is_sums.add_mean("rollout_corr/logprob_abs_diff_equal_version_mean",
                       diff.mean().item<double>(), same_tokens);
    }
  }
  for (const auto& [name, value] : is_sums.reduce(*comm_)) metrics[name] = value;

  // 4. Updates: the critic first (on the values it predicted), then the policy.
  if (critic_) {
    absl::Status s = update(batch, /*critic=*/true, &metrics);
    if (!s.ok()) return s;
  }
  FLYWHEEL_RETURN_IF_ERROR(update(batch, /*critic=*/false, &metrics));

  // Batch statistics (the same on every rank).
  double lengths = 0;
  for (const buffer::Trajectory* t : batch.sequences) lengths += t->response_ids.size();
  metrics["response_length/mean"] = lengths / static_cast<double>(batch.sequences.size());
  // Mixture of experts: how often the policy's router would pick other experts than the
  // rollout engine did, over this step's policy forwards (replayed or not).
  const RouteStats routes = policy_->take_route_stats();
  at::Tensor counts = at::tensor(
      {static_cast<double>(routes.pairs), static_cast<double>(routes.disagreements)}, at::kDouble);
  comm_->all_reduce_host(counts, comm::ReduceOp::kSum);
  if (counts[0].item<double>() > 0) {
    // The experts used differ from the engine's only without replay; the router's own choice
    // may differ either way.
    const double own = counts[1].item<double>() / counts[0].item<double>();
    metrics["rollout_corr/router_disagreement"] = options_.router_replay ? 0.0 : own;
    metrics["rollout_corr/router_disagreement_without_replay"] = own;
  }
  ++version_;
  metrics["actor/version"] = static_cast<double>(version_);
  return metrics;
}

}  // namespace flywheel::trainer
