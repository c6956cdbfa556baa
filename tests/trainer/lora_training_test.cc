// LoRA on the sharded learner under mpirun (1 and 2 ranks): the adapters' gradients equal
// single-process autograd through an unmerged DecoderModel (base frozen: its shards get none),
// with reshard_after_forward on and off; dropout masks survive the recompute; the optimizer and
// the checkpoint hold adapters only; buckets carry the merged model or the adapters alone; and a
// checkpoint exports merged and as a PEFT adapter that loads to the same model.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <filesystem>

#include "../model/test_models.h"
#include "flywheel/model/hf_checkpoint.h"
#include "flywheel/model/logprobs.h"
#include "flywheel/model/peft_adapter.h"
#include "flywheel/trainer/checkpoint.h"
#include "flywheel/trainer/optimizer_options.h"
#include "flywheel/trainer/sharded_adamw.h"
#include "flywheel/trainer/sharded_decoder.h"
#include "flywheel/trainer/weight_publisher.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"

namespace flywheel::trainer {
namespace {

namespace fs = std::filesystem;

model::LoraOptions lora_options(const model::ModelConfig& config) {
  model::LoraOptions lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = config.num_moe_layers() > 0 ? std::vector<std::string>{"q_proj", "o_proj"}
                                             : model::lora_target_modules();
  return lora;
}

// Two rows of two packed sequences each, from `seed` (one batch per rank).
PackedBatch make_batch(uint64_t seed, int64_t vocab) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const int64_t B = 2, T = 10;
  PackedBatch b;
  b.tokens = at::randint(vocab, {B, T}, gen, at::kLong);
  b.targets = at::randint(vocab, {B, T}, gen, at::kLong);
  b.positions = at::cat({at::arange(6, at::kLong), at::arange(4, at::kLong)}).repeat({B, 1});
  b.segment_ids = at::cat({at::ones({6}, at::kLong), at::full({4}, 2, at::kLong)}).repeat({B, 1});
  return b;
}

at::Tensor loss_weights(const PackedBatch& b, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed + 1000);
  return at::empty(b.tokens.sizes()).uniform_(-1, 1, gen);
}

using model::testing::lookup_with;

// Random adapter values (B included) by name, the same on every rank.
std::map<std::string, at::Tensor> random_adapters(const model::ModelConfig& config,
                                                  const model::LoraOptions& lora) {
  return model::testing::random_adapters(config, lora, 21, 0.2);
}

// Gathers every unit's gradient by parameter name (empty for units without one).
std::map<std::string, at::Tensor> gathered_grads(ShardedDecoder& model) {
  std::map<std::string, at::Tensor> out;
  for (FlatUnit& unit : model.units()) {
    if (!unit.shard().grad().defined()) continue;
    at::Tensor full = at::empty({unit.padded_numel()});
    model.comm().all_gather(unit.shard().grad(), full);
    for (auto& [name, grad] : unit.views(full)) out[name] = grad.clone();
  }
  return out;
}

struct Trained {
  std::unique_ptr<comm::MpiCommunicator> world;  // before the model, which uses it
  std::unique_ptr<ShardedDecoder> model;
  std::map<std::string, at::Tensor> grads;
  at::Tensor local;  // this rank's log-probs
};

// One forward / backward of this rank's batch through a LoRA decoder on `base` + `adapters`.
Trained train_once(const model::DecoderModel& base,
                   const std::map<std::string, at::Tensor>& adapters, bool reshard,
                   double dropout) {
  ShardingOptions options;
  options.reshard_after_forward = reshard;
  options.lora.adapters = lora_options(base.config());
  options.lora.dropout = dropout;
  options.lora.seed = 3;
  Trained t;
  t.world = testing::world_communicator();
  t.model = std::move(*ShardedDecoder::create(base.config(), t.world.get(), options));
  EXPECT_TRUE(t.model->load(lookup_with(base, adapters)).ok());
  const int rank = t.model->comm().rank();
  const PackedBatch mine = make_batch(100 + rank, base.config().vocab_size);
  t.local = t.model->forward(mine).logprobs;
  (t.local * loss_weights(mine, rank)).sum().backward();
  t.grads = gathered_grads(*t.model);
  return t;
}

TEST(LoraTrainingTest, AdapterGradientsEqualSingleProcessAutograd) {
  for (const char* family : {"qwen2", "qwen3", "qwen3_moe"}) {
    const model::ModelConfig config = model::testing::tiny_config(family);
    const auto base = model::testing::tiny_model(config);
    const model::LoraOptions lora = lora_options(config);
    const auto adapters = random_adapters(config, lora);
    // The reference: an unmerged DecoderModel whose adapters (only) require grad.
    model::LoraOptions unmerged = lora;
    unmerged.merged = false;
    auto reference = std::move(*model::DecoderModel::create(
        config, model::DecoderOptions{at::kFloat, at::kCPU, 0, unmerged}));
    ASSERT_TRUE(reference->load(lookup_with(*base, adapters)).ok());
    for (const auto& [name, p] : reference->named_parameters()) {
      if (model::is_lora_name(name)) const_cast<at::Tensor&>(p).requires_grad_(true);
    }
    for (bool reshard : {true, false}) {
      SCOPED_TRACE(std::string(family) + (reshard ? " reshard" : " keep"));
      Trained t = train_once(*base, adapters, reshard, 0.0);
      const int world = t.model->comm().size();
      at::Tensor total = at::zeros({});
      for (int r = 0; r < world; ++r) {
        const PackedBatch b = make_batch(100 + r, config.vocab_size);
        model::ForwardBatch fb;
        fb.tokens = b.tokens;
        fb.positions = b.positions;
        fb.segment_ids = b.segment_ids;
        at::Tensor lp =
            model::token_logprobs(reference->forward(fb), reference->lm_head_weight(), b.targets)
                .logprobs;
        if (r == t.model->comm().rank()) {
          EXPECT_LE((lp - t.local).abs().max().item<double>(), 1e-5);
        }
        total = total + (lp * loss_weights(b, r)).sum();
      }
      for (const auto& [name, p] : reference->named_parameters()) {
        if (p.grad().defined()) const_cast<at::Tensor&>(p).mutable_grad().zero_();
      }
      total.backward();
      double worst = 0, largest = 0;
      int64_t checked = 0;
      for (const auto& [name, p] : reference->named_parameters()) {
        if (!model::is_lora_name(name)) {
          EXPECT_EQ(t.grads.count(name), 0u) << name << ": a frozen base weight got a gradient";
          continue;
        }
        ASSERT_EQ(t.grads.count(name), 1u) << name;
        worst = std::max(worst, (t.grads.at(name) - p.grad()).abs().max().item<double>());
        largest = std::max(largest, p.grad().abs().max().item<double>());
        ++checked;
      }
      EXPECT_EQ(checked, static_cast<int64_t>(adapters.size()));
      if (t.model->comm().rank() == 0) {
        std::printf(
            "  %s reshard=%d ranks=%d: max |adapter grad - reference| = %.3g (largest "
            "gradient %.3g)\n",
            family, reshard, world, worst, largest);
      }
      EXPECT_LE(worst, 1e-5 * std::max(1.0, largest));  // float32 sums in another order
    }
  }
}

// Dropout on the adapters' inputs: a checkpointed layer's recompute draws the masks its forward
// drew, so the gradients equal those of kept activations; and dropout does change them.
TEST(LoraTrainingTest, DropoutMasksSurviveTheRecompute) {
  const model::ModelConfig config = model::testing::tiny_config("qwen2");
  const auto base = model::testing::tiny_model(config);
  const auto adapters = random_adapters(config, lora_options(config));
  Trained recomputed = train_once(*base, adapters, true, 0.3);
  Trained kept = train_once(*base, adapters, false, 0.3);
  Trained none = train_once(*base, adapters, false, 0.0);
  double same = 0, changed = 0;
  for (const auto& [name, g] : kept.grads) {
    same = std::max(same, (recomputed.grads.at(name) - g).abs().max().item<double>());
    changed = std::max(changed, (none.grads.at(name) - g).abs().max().item<double>());
  }
  EXPECT_LE(same, 1e-6);
  EXPECT_GT(changed, 1e-3);
}

// The optimizer's state, the checkpoint and the published weights hold adapters only; full
// buckets carry the merged model.
TEST(LoraTrainingTest, AdaptersOnlyInOptimizerCheckpointAndPublication) {
  const model::ModelConfig config = model::testing::tiny_config("qwen2");
  const auto base = model::testing::tiny_model(config);
  const model::LoraOptions lora = lora_options(config);
  const auto adapters = random_adapters(config, lora);
  Trained t = train_once(*base, adapters, true, 0.0);
  ShardedDecoder& model = *t.model;
  const int world = model.comm().size();
  int64_t adapter_numel = 0;
  for (const model::ParamSpec& s : model::lora_parameter_specs(config, lora)) {
    adapter_numel += s.shape[0] * s.shape[1];
  }
  auto optimizer = ShardedAdamW::for_model(model, {});
  int64_t trainable_shards = 0;
  for (const FlatUnit* unit : model.trainable_units()) trainable_shards += unit->shard_numel();
  EXPECT_EQ(optimizer->local_bytes(), trainable_shards * 8);
  EXPECT_LE(trainable_shards * world, adapter_numel + 2 * world);  // padding per unit only
  EXPECT_EQ(model.trainable_units().size(), 2u);                   // one adapter unit per layer

  // Publication: adapters only, their bytes.
  auto published = gather_weights(model, at::kFloat, 1, 1 << 20);
  ASSERT_TRUE(published.ok());
  if (model.comm().rank() == 0) {
    EXPECT_EQ(static_cast<int64_t>(published->payload.size()), adapter_numel * 4);
    for (const core::WeightTensor& w : published->tensors) {
      EXPECT_TRUE(model::is_lora_name(w.name)) << w.name;
    }
  }
  // Full buckets: the merged weights under the base names.
  std::map<std::string, at::Tensor> full;
  model.for_each_full_bucket(1 << 20, at::kFloat, [&](const auto& bucket) {
    for (const auto& [name, value] : bucket) full[name] = value;
  });
  EXPECT_EQ(full.size(), base->named_parameters().size());
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  at::Tensor want = base->named_parameters()[0].second;  // any; replaced below
  for (const auto& [name, p] : base->named_parameters()) {
    if (name == q)
      want = model::merge_lora(p, adapters.at(model::lora_a_name(q)),
                               adapters.at(model::lora_b_name(q)), lora.scale());
  }
  EXPECT_LE((full.at(q) - want).abs().max().item<double>(), 1e-6);
}

// A checkpoint of a LoRA model: resumed, it restores the adapters; exported, the merged model and
// the PEFT adapter (loaded onto its base and merged) give the same log-probs.
TEST(LoraTrainingTest, CheckpointExportsMergedAndAsPeftAdapter) {
  auto world = testing::world_communicator();
  const model::ModelConfig config = model::testing::tiny_config("qwen3");
  const std::string dir = ::testing::TempDir() + "/lora_export_np" + std::to_string(world->size());
  if (world->rank() == 0) {
    fs::remove_all(dir);
    ASSERT_TRUE(model::save_hf_model(*model::testing::tiny_model(config), dir + "/base").ok());
  }
  world->barrier();
  auto base = std::move(*model::load_hf_model(dir + "/base", {}));
  const model::LoraOptions lora = lora_options(config);
  const auto adapters = random_adapters(config, lora);
  ShardingOptions options;
  options.lora.adapters = lora;
  options.lora.base_path = dir + "/base";
  auto model = std::move(*ShardedDecoder::create(config, world.get(), options));
  ASSERT_TRUE(model->load(lookup_with(*base, adapters)).ok());
  auto optimizer = ShardedAdamW::for_model(*model, {});
  UpdateCounters counters;
  ASSERT_TRUE(
      save_checkpoint(policy_training_state(*model, *optimizer, counters), *world, dir + "/ckpt", 1)
          .ok());
  const std::string step = dir + "/ckpt/step_1";

  // Resume: fresh adapters, then the checkpoint's.
  auto resumed = std::move(*ShardedDecoder::create(config, world.get(), options));
  ASSERT_TRUE(resumed->load(lookup_with(*base, {})).ok());
  auto resumed_optimizer = ShardedAdamW::for_model(*resumed, {});
  ASSERT_TRUE(
      load_checkpoint(policy_training_state(*resumed, *resumed_optimizer, counters), *world, step)
          .ok());
  for (size_t u = 0; u < model->units().size(); ++u) {
    EXPECT_TRUE(resumed->units()[u].shard().equal(model->units()[u].shard()))
        << model->units()[u].name();
  }

  if (world->rank() == 0) {
    ASSERT_TRUE(export_checkpoint(step, "policy", dir + "/merged", at::kFloat).ok());
    ASSERT_TRUE(export_adapter(step, "policy", dir + "/adapter").ok());
    EXPECT_TRUE(model::is_peft_adapter(dir + "/adapter"));
    auto merged = model::load_hf_model(dir + "/merged", {});
    auto peft = model::load_hf_model(dir + "/adapter", {});
    ASSERT_TRUE(merged.ok()) << merged.status();
    ASSERT_TRUE(peft.ok()) << peft.status();
    const PackedBatch b = make_batch(7, config.vocab_size);
    model::ForwardBatch fb;
    fb.tokens = b.tokens;
    fb.positions = b.positions;
    fb.segment_ids = b.segment_ids;
    auto logprobs = [&](const model::DecoderModel& m) {
      return model::token_logprobs(m.forward(fb), m.lm_head_weight(), b.targets).logprobs;
    };
    const double diff = (logprobs(**merged) - logprobs(**peft)).abs().max().item<double>();
    const double moved = (logprobs(**merged) - logprobs(*base)).abs().max().item<double>();
    std::printf(
        "  PEFT round trip: max |log-prob(peft) - log-prob(merged)| = %.3g (the adapters "
        "move them by up to %.3g)\n",
        diff, moved);
    EXPECT_LE(diff, 1e-5);
    EXPECT_GT(moved, 1e-2);
  }
  world->barrier();
  // A model trained without LoRA has no adapter to export.
  ShardingOptions full_options;
  auto full = std::move(*ShardedDecoder::create(config, world.get(), full_options));
  full->init_random(1);
  auto full_optimizer = ShardedAdamW::for_model(*full, {});
  ASSERT_TRUE(save_checkpoint(policy_training_state(*full, *full_optimizer, counters), *world,
                              dir + "/full", 1)
                  .ok());
  if (world->rank() == 0) {
    absl::Status refused = export_adapter(dir + "/full/step_1", "policy", dir + "/none");
    EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
    fs::remove_all(dir);
  }
  world->barrier();
}

}  // namespace
}  // namespace flywheel::trainer

int main(int argc, char** argv) { return flywheel::testing::run_mpi_tests(argc, argv); }
