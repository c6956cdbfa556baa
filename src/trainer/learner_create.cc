// Learner::create (learner.h): the learner's models, optimizers and schedules from its options,
// or from a config.
#include "flywheel/trainer/learner.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "flywheel/core/plugin_registry.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::trainer {

absl::StatusOr<std::unique_ptr<Learner>> Learner::create(const core::Config& config,
                                                         const model::ModelConfig& model_config,
                                                         comm::Communicator* comm,
                                                         core::PluginRegistry& registry) {
  LearnerOptions options = LearnerOptions::from_config(config);
  FLYWHEEL_ASSIGN_OR_RETURN(algos::Algorithm algorithm, algos::Algorithm::create(config, registry));
  options.sharding.device = comm->device();  // NCCL learners train on their GPU
  if (!config.distill.teacher_path.empty()) {
    const std::string path =
        (std::filesystem::path(config.distill.teacher_path) / "config.json").string();
    absl::StatusOr<model::ModelConfig> teacher = model::ModelConfig::from_file(path);
    if (!teacher.ok()) {
      return absl::Status(teacher.status().code(),
                          absl::StrCat("distill.teacher_path: ", teacher.status().message()));
    }
    if (teacher->vocab_size != model_config.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("distill.teacher_path: the teacher's vocabulary has ", teacher->vocab_size,
                       " ids, the policy's ", model_config.vocab_size,
                       ": distillation compares their "
                       "log-probs of the same tokens, so both need the same tokenizer"));
    }
    options.teacher = std::move(*teacher);
    options.distill_coef = config.distill.coef;
  }
  return create(options, std::move(algorithm), model_config, comm);
}

absl::StatusOr<std::unique_ptr<Learner>> Learner::create(const LearnerOptions& options,
                                                         algos::Algorithm algorithm,
                                                         const model::ModelConfig& model_config,
                                                         comm::Communicator* comm) {
  if (options.ppo_epochs < 1 || options.mini_batches < 1 || options.micro_batch_tokens < 1) {
    return absl::InvalidArgumentError("ppo_epochs, mini_batches, micro_batch_tokens must be >= 1");
  }
  if (!(options.temperature > 0)) return absl::InvalidArgumentError("temperature must be > 0");
  if (options.router_replay && model_config.num_moe_layers() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "algorithm.router_replay: r3 replays a mixture-of-experts model's routes, but this ",
        model_config.model_type, " model has no mixture-of-experts layers; use none"));
  }
  std::unique_ptr<Learner> learner(new Learner(options, std::move(algorithm), comm));
  ShardingOptions policy_options = options.sharding;
  policy_options.value_head = false;
  ShardingOptions routed = policy_options;  // the policy's forwards see the engine's routes
  policy_options.lora = {};                 // the reference and the teacher are whole frozen models
  if (model_config.num_moe_layers() > 0) {
    routed.routes = options.router_replay ? RouteUse::kReplay : RouteUse::kCompare;
  }
  routed.load_balancing = true;  // when the config asks for it (the critic's too)
  // The load-balancing loss counts every sample's prompt tokens.
  if (wants_load_balancing(model_config)) learner->options_.shared_prefix = false;
  auto policy = ShardedDecoder::create(model_config, comm, routed);
  if (!policy.ok()) return policy.status();
  learner->policy_ = std::move(*policy);
  learner->optimizer_ = ShardedAdamW::for_model(*learner->policy_, options.adamw);
  FLYWHEEL_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::create(options.lr));
  learner->schedule_ = schedule;
  if (options.kl_coef > 0) {
    auto reference = ShardedDecoder::create(model_config, comm, policy_options);
    if (!reference.ok()) return reference.status();
    learner->reference_ = std::move(*reference);
    if (options.kl_in_reward && options.adaptive_kl) {
      learner->kl_controller_.emplace(options.kl_coef, options.kl_target, options.kl_horizon);
    }
  }
  if (options.teacher) {
    auto teacher = ShardedDecoder::create(*options.teacher, comm, policy_options);
    if (!teacher.ok()) return teacher.status();
    learner->teacher_ = std::move(*teacher);
  }
  if (options.critic) {
    ShardingOptions critic_options = options.sharding;
    critic_options.value_head = true;
    critic_options.lora = {};  // LoRA adapts the policy; the critic trains every weight
    critic_options.load_balancing = true;
    auto critic = ShardedDecoder::create(model_config, comm, critic_options);
    if (!critic.ok()) return critic.status();
    learner->critic_ = std::move(*critic);
    learner->critic_optimizer_ = ShardedAdamW::for_model(*learner->critic_, options.adamw);
    LrScheduleOptions critic_lr = options.lr;
    critic_lr.lr = options.critic_lr;
    FLYWHEEL_ASSIGN_OR_RETURN(LrSchedule critic_schedule, LrSchedule::create(critic_lr));
    learner->critic_schedule_ = critic_schedule;
  }
  return learner;
}

}  // namespace flywheel::trainer
