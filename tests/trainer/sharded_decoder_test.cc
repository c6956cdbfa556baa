// The sharded decoder under mpirun (1, 2 and 4 ranks): forward values and gradients equal plain
// single-process autograd on the unsharded model for the same micro-batches (each rank runs its
// own; the reference runs all of them), with reshard_after_forward on and off, for every model
// family (Qwen3's tied embedding and Qwen3-MoE's experts included) and for a critic's value head.
#include "flywheel/trainer/sharded_decoder.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>

#include "../model/test_models.h"
#include "flywheel/model/logprobs.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"

namespace flywheel::trainer {
namespace {

// Two rows of packed sequences, drawn from `seed` (one batch per rank).
PackedBatch make_batch(uint64_t seed, int64_t vocab) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const int64_t B = 2, T = 12;
  PackedBatch b;
  b.tokens = at::randint(vocab, {B, T}, gen, at::kLong);
  b.targets = at::randint(vocab, {B, T}, gen, at::kLong);
  b.positions = at::zeros({B, T}, at::kLong);
  b.segment_ids = at::zeros({B, T}, at::kLong);
  // Row 0: sequences of 5 and 7 tokens; row 1: 4 and 5 tokens, then 3 of padding.
  const std::vector<std::vector<int64_t>> lengths = {{5, 7}, {4, 5}};
  for (int64_t r = 0; r < B; ++r) {
    int64_t t = 0, segment = 1;
    for (int64_t len : lengths[r]) {
      for (int64_t k = 0; k < len; ++k, ++t) {
        b.positions[r][t] = k;
        b.segment_ids[r][t] = segment;
      }
      ++segment;
    }
  }
  return b;
}

// Per-token weights of the test loss (0 at padding).
at::Tensor loss_weights(const PackedBatch& b, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed + 1000);
  return at::empty(b.tokens.sizes()).uniform_(-1, 1, gen) * b.segment_ids.ne(0).to(at::kFloat);
}

// The unsharded reference: outputs for one batch with autograd into `model`'s parameters.
at::Tensor reference_outputs(const model::DecoderModel& m, const at::Tensor& score_weight,
                             const PackedBatch& b) {
  model::ForwardBatch fb;
  fb.tokens = b.tokens;
  fb.positions = b.positions;
  fb.segment_ids = b.segment_ids;
  at::Tensor hidden = m.forward(fb);
  if (score_weight.defined()) return at::matmul(hidden, score_weight.t()).squeeze(-1);
  return model::token_logprobs(hidden, m.lm_head_weight(), b.targets).logprobs;
}

// odd_sizes: one head of 34 dimensions, so that a unit's size (97 x 34 for the embedding) is not a
// multiple of 4 ranks and its last shard ends in padding.
void check_against_reference(const std::string& family, bool reshard, bool value_head,
                             bool odd_sizes = false) {
  SCOPED_TRACE(family + (reshard ? " reshard" : " keep") + (value_head ? " critic" : "") +
               (odd_sizes ? " odd sizes" : ""));
  auto world = testing::world_communicator();
  model::ModelConfig config = model::testing::tiny_config(family);
  if (odd_sizes) {
    config.hidden_size = config.head_dim = 34;
    config.num_attention_heads = config.num_key_value_heads = 1;
  }
  ShardingOptions options;
  options.reshard_after_forward = reshard;
  options.value_head = value_head;
  auto sharded = ShardedDecoder::create(config, world.get(), options);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  (*sharded)->init_random(5);

  // Reference parameters: the same initial values, unsharded, with autograd.
  auto reference = std::move(*model::DecoderModel::create(config, {}));
  std::vector<model::ParamSpec> specs =
      value_head ? critic_parameter_specs(config) : model::decoder_parameter_specs(config);
  std::map<std::string, at::Tensor> values;
  model::random_parameters(
      specs, config.initializer_range, 5,
      [&](const model::ParamSpec& s, const at::Tensor& v) { values[s.name] = v.clone(); });
  for (const auto& [name, p] : reference->named_parameters()) {
    if (!values.count(name)) continue;  // a critic has no lm_head
    at::NoGradGuard no_grad;
    const_cast<at::Tensor&>(p).copy_(values.at(name));
    const_cast<at::Tensor&>(p).requires_grad_(true);
  }
  at::Tensor score;
  if (value_head) score = values.at("score.weight").clone().requires_grad_(true);

  // Sharded: this rank's batch only.
  const PackedBatch mine = make_batch(100 + world->rank(), config.vocab_size);
  TokenOutputs out = (*sharded)->forward(mine);
  at::Tensor local = value_head ? out.values : out.logprobs;
  at::Tensor ref_local = reference_outputs(*reference, score, mine);
  const at::Tensor valid = mine.segment_ids.ne(0);
  EXPECT_LE((local - ref_local).abs().masked_select(valid).max().item<double>(), 1e-5);
  (local * loss_weights(mine, world->rank())).sum().backward();

  // Reference: every rank's batch.
  at::Tensor total = at::zeros({});
  for (int r = 0; r < world->size(); ++r) {
    const PackedBatch b = make_batch(100 + r, config.vocab_size);
    total = total + (reference_outputs(*reference, score, b) * loss_weights(b, r)).sum();
  }
  total.backward();
  std::map<std::string, at::Tensor> ref_grads;
  for (const auto& [name, p] : reference->named_parameters()) ref_grads[name] = p.grad();
  if (value_head) ref_grads["score.weight"] = score.grad();

  double worst = 0;
  int64_t padding = 0;
  for (FlatUnit& unit : (*sharded)->units()) {
    ASSERT_TRUE(unit.shard().grad().defined()) << unit.name();
    at::Tensor full = at::empty({unit.padded_numel()});
    world->all_gather(unit.shard().grad(), full);
    // The padding past the unit's parameters (numel not a multiple of the ranks) has no gradient.
    padding += unit.padded_numel() - unit.numel();
    EXPECT_TRUE(
        full.narrow(0, unit.numel(), unit.padded_numel() - unit.numel()).eq(0).all().item<bool>())
        << unit.name();
    for (auto& [name, grad] : unit.views(full)) {
      at::Tensor want = ref_grads.at(name);
      ASSERT_TRUE(want.defined()) << name;
      worst = std::max(worst, (grad - want).abs().max().item<double>());
    }
  }
  if (world->rank() == 0) {
    std::printf(
        "  %s reshard=%d critic=%d ranks=%d: max |grad - reference| = %.3g (%lld padding "
        "elements)\n",
        family.c_str(), reshard, value_head, world->size(), worst, static_cast<long long>(padding));
  }
  EXPECT_LE(worst, 1e-5);
}

TEST(ShardedDecoderTest, GradientsEqualSingleProcessAutograd) {
  for (const char* family : {"qwen2", "qwen3", "qwen3_moe", "llama"}) {
    for (bool reshard : {true, false}) check_against_reference(family, reshard, false);
  }
  check_against_reference("qwen2", /*reshard=*/true, /*value_head=*/false, /*odd_sizes=*/true);
}

TEST(ShardedDecoderTest, CriticGradientsEqualSingleProcessAutograd) {
  for (bool reshard : {true, false}) check_against_reference("qwen2", reshard, true);
}

// A mixture of experts whose config asks for the load-balancing loss: forward() returns it, the
// same with and without resharding, and its gradient reaches every sparse layer's router.
TEST(ShardedDecoderTest, LoadBalancingLossReachesTheRouters) {
  auto world = testing::world_communicator();
  model::ModelConfig config = model::testing::tiny_config("qwen3_moe");
  config.output_router_logits = true;
  config.router_aux_loss_coef = 0.01;
  std::vector<double> losses;
  for (bool reshard : {true, false}) {
    ShardingOptions options;
    options.reshard_after_forward = reshard;
    options.load_balancing = true;
    auto sharded = std::move(*ShardedDecoder::create(config, world.get(), options));
    sharded->init_random(5);
    TokenOutputs out = sharded->forward(make_batch(100 + world->rank(), config.vocab_size));
    ASSERT_TRUE(out.aux_loss.defined());
    losses.push_back(out.aux_loss.item<double>());
    EXPECT_GT(losses.back(), 0.0);
    out.aux_loss.backward();
    for (FlatUnit& unit : sharded->units()) {
      if (!unit.shard().grad().defined()) continue;
      at::Tensor full = at::empty({unit.padded_numel()});
      world->all_gather(unit.shard().grad(), full);
      for (auto& [name, grad] : unit.views(full)) {
        if (name.find("mlp.gate.weight") == std::string::npos) continue;
        EXPECT_GT(grad.abs().sum().item<double>(), 0) << name;
      }
    }
  }
  EXPECT_DOUBLE_EQ(losses[0], losses[1]);
  ShardingOptions off;  // the trainers that do not add it leave it undefined
  auto plain = std::move(*ShardedDecoder::create(config, world.get(), off));
  plain->init_random(5);
  EXPECT_FALSE(plain->forward(make_batch(100, config.vocab_size)).aux_loss.defined());
}

// The full-weights view: every parameter once, in buckets, equal to the initial values.
TEST(ShardedDecoderTest, FullWeightsComeBackInBuckets) {
  auto world = testing::world_communicator();
  const model::ModelConfig config = model::testing::tiny_config("qwen3");
  auto sharded = std::move(*ShardedDecoder::create(config, world.get(), {}));
  sharded->init_random(9);
  auto reference = std::move(*model::DecoderModel::create(config, {}));
  reference->init_random(9);
  std::map<std::string, at::Tensor> seen;
  int buckets = 0;
  sharded->for_each_full_bucket(
      /*bucket_bytes=*/16 << 10, at::kFloat,
      [&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
        ++buckets;
        int64_t bytes = 0;
        for (const auto& [name, t] : bucket) {
          EXPECT_EQ(seen.count(name), 0u) << name;
          seen[name] = t;
          bytes += t.numel() * 4;
        }
        if (bucket.size() > 1) EXPECT_LE(bytes, 16 << 10);
      });
  EXPECT_GT(buckets, 3);
  ASSERT_EQ(seen.size(), reference->named_parameters().size());
  for (const auto& [name, p] : reference->named_parameters()) {
    EXPECT_TRUE(at::equal(seen.at(name), p)) << name;
  }
}

TEST(ShardedDecoderTest, LoadsBfloat16CheckpointTensorsAndRefusesFloat16OnCpu) {
  auto world = testing::world_communicator();
  const model::ModelConfig config = model::testing::tiny_config("qwen2");
  auto reference = std::move(*model::DecoderModel::create(config, {}));
  reference->init_random(3);
  std::map<std::string, at::Tensor> stored;  // as a bf16 checkpoint holds them
  for (const auto& [name, p] : reference->named_parameters()) stored[name] = p.to(at::kBFloat16);
  auto sharded = std::move(*ShardedDecoder::create(config, world.get(), {}));
  ASSERT_TRUE(sharded
                  ->load([&](const std::string& name) -> absl::StatusOr<at::Tensor> {
                    if (!stored.count(name)) return absl::NotFoundError(name);
                    return stored.at(name);
                  })
                  .ok());
  sharded->for_each_full_bucket(
      1 << 20, at::kFloat, [&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
        for (const auto& [name, t] : bucket) {
          EXPECT_TRUE(at::equal(t, stored.at(name).to(at::kFloat))) << name;
        }
      });

  ShardingOptions half;
  half.param_dtype = at::kHalf;
  auto refused = ShardedDecoder::create(config, world.get(), half);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("float16"), std::string::npos);
}

}  // namespace
}  // namespace flywheel::trainer

int main(int argc, char** argv) { return flywheel::testing::run_mpi_tests(argc, argv); }
