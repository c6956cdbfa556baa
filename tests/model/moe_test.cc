// Qwen3-MoE in the decoder: parameters, the forward against the float64 reference, greedy
// decoding, gradients against finite differences, and rollout routing replay (R3).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <map>

#include "flywheel/core/file_io.h"
#include "flywheel/model/decoder.h"
#include "flywheel/model/hf_checkpoint.h"
#include "gtest/gtest.h"
#include "reference_decoder.h"
#include "test_models.h"
#include "testing/scratch_dir.h"

namespace flywheel::model {
namespace {

using testing::full_batch;
using testing::kTokens;
using testing::param;
using testing::reference_logits;
using testing::tiny_config;
using testing::tiny_model;

std::vector<int64_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor t = at::randint(vocab, {n}, gen, at::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

TEST(MoeTest, ParametersFollowHuggingFaceAndAreCounted) {
  auto model = tiny_model("qwen3_moe");
  EXPECT_EQ(param(*model, "model.layers.0.mlp.gate.weight").sizes(), (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(param(*model, "model.layers.2.mlp.experts.3.down_proj.weight").sizes(),
            (std::vector<int64_t>{32, 24}));
  EXPECT_EQ(param(*model, "model.layers.0.mlp.experts.0.gate_proj.weight").sizes(),
            (std::vector<int64_t>{24, 32}));
  EXPECT_FALSE(param(*model, "model.layers.0.mlp.gate_proj.weight").defined());
  EXPECT_FALSE(param(*model, "model.layers.0.mlp.experts.4.up_proj.weight").defined());
  // Layer 1 is in mlp_only_layers: a dense MLP, no router.
  EXPECT_TRUE(param(*model, "model.layers.1.mlp.gate_proj.weight").defined());
  EXPECT_FALSE(param(*model, "model.layers.1.mlp.gate.weight").defined());
  EXPECT_TRUE(param(*model, "model.layers.1.self_attn.q_norm.weight").defined());
  int64_t count = 0;
  for (const auto& [n, p] : model->named_parameters()) count += p.numel();
  EXPECT_EQ(count, model->config().num_parameters());
  EXPECT_EQ(model->config().num_moe_layers(), 2);
}

TEST(MoeTest, ConfigRoundTripsThroughJson) {
  ModelConfig c = tiny_config("qwen3_moe");
  c.decoder_sparse_step = 2;
  c.router_aux_loss_coef = 0.01;
  c.output_router_logits = true;
  const core::Json json = c.to_json();
  EXPECT_EQ(json.find("architectures")->as_array()[0].as_string(), "Qwen3MoeForCausalLM");
  auto back = ModelConfig::from_json(json, "config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->num_experts, 4);
  EXPECT_EQ(back->num_experts_per_tok, 2);
  EXPECT_EQ(back->moe_intermediate_size, 24);
  EXPECT_EQ(back->decoder_sparse_step, 2);
  EXPECT_TRUE(back->norm_topk_prob);
  EXPECT_EQ(back->mlp_only_layers, (std::vector<int64_t>{1}));
  EXPECT_DOUBLE_EQ(back->router_aux_loss_coef, 0.01);
  EXPECT_TRUE(back->output_router_logits);
  EXPECT_TRUE(back->qk_norm);
  EXPECT_EQ(back->num_parameters(), c.num_parameters());
  // Layers 1 (odd: (1 + 1) % 2 == 0) is the only sparse one; mlp_only_layers keeps it dense.
  EXPECT_EQ(back->num_moe_layers(), 0);
}

TEST(MoeTest, BadExpertSettingsAreNamed) {
  auto fails = [](const std::function<void(ModelConfig&)>& edit, const std::string& key) {
    ModelConfig c = tiny_config("qwen3_moe");
    edit(c);
    const absl::Status status = c.validate();
    EXPECT_FALSE(status.ok()) << key;
    EXPECT_NE(std::string(status.message()).find(key), std::string::npos) << status;
  };
  fails([](ModelConfig& c) { c.num_experts_per_tok = 5; }, "num_experts_per_tok");
  fails([](ModelConfig& c) { c.num_experts_per_tok = 0; }, "num_experts_per_tok");
  fails([](ModelConfig& c) { c.moe_intermediate_size = 0; }, "moe_intermediate_size");
  fails([](ModelConfig& c) { c.decoder_sparse_step = 0; }, "decoder_sparse_step");
  fails([](ModelConfig& c) { c.mlp_only_layers = {3}; }, "mlp_only_layers");
  fails([](ModelConfig& c) { c.router_aux_loss_coef = -1; }, "router_aux_loss_coef");
  fails([](ModelConfig& c) { c.model_type = "qwen3"; }, "qwen3_moe");
  core::Json json = tiny_config("qwen3_moe").to_json();
  json.set("num_experts", core::Json("eight"));
  auto parsed = ModelConfig::from_json(json, "cfg.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(std::string(parsed.status().message()).find("cfg.json: num_experts"), std::string::npos)
      << parsed.status();
}

// Every other layer sparse (decoder_sparse_step 2), 3 of 6 experts, probabilities not
// renormalised: against the float64 reference.
TEST(MoeTest, SparseStepAndUnnormalisedTopKMatchTheReference) {
  ModelConfig c = tiny_config("qwen3_moe");
  c.num_hidden_layers = 4;
  c.decoder_sparse_step = 2;
  c.mlp_only_layers = {};
  c.norm_topk_prob = false;
  c.num_experts = 6;
  c.num_experts_per_tok = 3;
  ASSERT_TRUE(c.is_moe_layer(1) && c.is_moe_layer(3) && !c.is_moe_layer(0) && !c.is_moe_layer(2));
  auto model = tiny_model(c, at::kFloat, 3);
  const std::vector<int64_t> tokens = random_tokens(24, c.vocab_size, 5);
  at::Tensor logits = model->logits(model->forward(full_batch(tokens)))[0].to(at::kDouble);
  at::Tensor expected = reference_logits(*model, tokens);
  EXPECT_TRUE(at::allclose(logits, expected, 1e-4, 1e-4))
      << (logits - expected).abs().max().item<double>();
}

// A checkpoint as Hugging Face lays it out (what `flywheel score` and `generate` load): saved,
// loaded back, and scored against the float64 reference of the original weights. A config.json
// that claims more experts than the weights hold is refused before anything is allocated.
TEST(MoeTest, CheckpointsLoadAndScoreLikeTheReference) {
  flywheel::testing::ScratchDir scratch("flywheel_moe");
  const std::string dir = scratch.path().string();
  auto model = tiny_model("qwen3_moe", at::kFloat, 4);
  ASSERT_TRUE(save_hf_model(*model, dir).ok());
  auto loaded = load_hf_model(dir, DecoderOptions{});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().num_experts, 4);
  const at::Tensor logits =
      (*loaded)->logits((*loaded)->forward(full_batch(kTokens)))[0].to(at::kDouble);
  const at::Tensor expected = reference_logits(*model, kTokens);
  EXPECT_TRUE(at::allclose(logits, expected, 1e-4, 1e-4))
      << (logits - expected).abs().max().item<double>();

  core::Json config = model->config().to_json();
  config.set("num_experts", core::Json(int64_t{4096}));
  ASSERT_TRUE(core::write_file_atomically(dir + "/config.json", config.dump()).ok());
  auto refused = load_hf_model(dir, DecoderOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message())
                .find("num_experts 4096 but the weights hold "
                      "at most 4 expert(s) per layer"),
            std::string::npos)
      << refused.status();
}

// Greedy decoding through the cache (prefill, then one token per forward) picks what the
// float64 reference picks at every step.
TEST(MoeTest, GreedyDecodeMatchesTheReference) {
  auto model = tiny_model("qwen3_moe", at::kFloat, 11);
  at::NoGradGuard no_grad;
  std::vector<int64_t> ours = {5, 17, 3}, reference = ours;
  auto cache = std::move(*model->make_cache(1, 32));
  ForwardBatch b = full_batch(ours);
  b.slots = {0};
  b.lengths = {3};
  at::Tensor logits = model->logits(model->forward(b, cache.get()))[0][-1];
  for (int step = 0; step < 12; ++step) {
    const int64_t next = logits.argmax().item<int64_t>();
    const int64_t expected = reference_logits(*model, reference)[-1].argmax().item<int64_t>();
    ASSERT_EQ(next, expected) << "step " << step;
    ours.push_back(next);
    reference.push_back(expected);
    ForwardBatch d;
    d.tokens = at::tensor(std::vector<int64_t>{next}).view({1, 1});
    d.positions =
        at::tensor(std::vector<int64_t>{static_cast<int64_t>(ours.size()) - 1}).view({1, 1});
    d.slots = {0};
    d.lengths = {1};
    logits = model->logits(model->forward(d, cache.get()))[0][-1];
  }
}

// One token routed to 2 of 4 experts: only those two (per sparse layer) get gradients; the
// others never ran.
TEST(MoeTest, OnlyTheChosenExpertsRun) {
  auto model = tiny_model("qwen3_moe");
  for (auto& [n, p] : model->named_parameters()) const_cast<at::Tensor&>(p).requires_grad_(true);
  RouteRecord record;
  at::Tensor loss =
      model->logits(model->forward(full_batch({42}), nullptr, &record)).logsumexp(-1).sum();
  loss.backward();
  ASSERT_EQ(record.layers.size(), 2u);
  for (int64_t moe = 0; moe < 2; ++moe) {
    const int64_t layer = moe == 0 ? 0 : 2;
    const at::Tensor chosen = record.layers[moe].view({-1});
    for (int64_t e = 0; e < 4; ++e) {
      const bool used = chosen.eq(e).any().item<bool>();
      const std::string name = "model.layers." + std::to_string(layer) + ".mlp.experts." +
                               std::to_string(e) + ".up_proj.weight";
      const at::Tensor grad = param(*model, name).grad();
      EXPECT_EQ(grad.defined() && grad.abs().sum().item<double>() > 0, used) << name;
    }
    EXPECT_GT(param(*model, "model.layers." + std::to_string(layer) + ".mlp.gate.weight")
                  .grad()
                  .abs()
                  .sum()
                  .item<double>(),
              0);
  }
}

// The learner's layer (decoder_layer, as the sharded learner runs it) in float64: autograd's
// gradients of the router, the experts and the input equal central finite differences, with the
// router's own routes and with replayed ones (the router still learns through the weights of the
// replayed experts).
TEST(MoeTest, LayerGradientsMatchFiniteDifferences) {
  const ModelConfig c = tiny_config("qwen3_moe");
  auto model = tiny_model(c, at::kFloat, 5);
  std::map<std::string, at::Tensor> weights;
  for (const auto& [n, p] : model->named_parameters()) {
    weights[n] = p.detach().to(at::kDouble).clone().requires_grad_(true);
  }
  auto find = [&](const std::string& n) {
    auto it = weights.find(n);
    return it == weights.end() ? at::Tensor() : it->second;
  };
  const DecoderLayerWeights layer = layer_weights(0, find);
  ASSERT_TRUE(layer.router.defined());
  ASSERT_EQ(layer.experts.size(), 4u);
  at::Generator gen = at::detail::createCPUGenerator(9);
  const int64_t T = 6;
  const at::Tensor x = at::randn({1, T, c.hidden_size}, gen, at::kDouble).requires_grad_(true);
  const at::Tensor probe = at::randn({1, T, c.hidden_size}, gen, at::kDouble);
  ForwardBatch batch = full_batch(std::vector<int64_t>(T, 1));
  for (bool replay : {false, true}) {
    SCOPED_TRACE(replay ? "replayed routes" : "the router's routes");
    if (replay) {  // every token uses experts 3 and 1, whatever the router prefers
      batch.routes = at::tensor(std::vector<int64_t>{3, 1}).view({1, 1, 1, 2}).expand({1, T, 1, 2});
    }
    const SequenceContext context = sequence_context(c, batch, at::kDouble, at::kCPU);
    auto loss = [&] { return (decoder_layer(c, layer, x, context) * probe).sum(); };
    for (auto& [n, w] : weights) {
      if (w.grad().defined()) w.grad().zero_();
    }
    if (x.grad().defined()) x.grad().zero_();
    loss().backward();
    std::vector<std::pair<at::Tensor, std::string>> checked = {
        {layer.router, "router"},
        {layer.experts[1].gate, "expert 1 gate"},
        {layer.experts[3].down, "expert 3 down"},
        {layer.q, "q"},
        {x, "input"}};
    for (const auto& [tensor, what] : checked) {
      const at::Tensor flat = tensor.detach().view({-1});
      const at::Tensor grad = tensor.grad().view({-1});
      for (int64_t i : {int64_t{0}, flat.numel() / 3, flat.numel() - 1}) {
        // With gradients on, as the learner runs: the no-gradient path's attention reduces in
        // float32 (prefill_attention.h), too coarse for differences of 1e-6.
        const double h = 1e-6, saved = flat[i].item<double>();
        flat[i] = saved + h;
        const double up = loss().item<double>();
        flat[i] = saved - h;
        const double down = loss().item<double>();
        flat[i] = saved;
        const double numeric = (up - down) / (2 * h);
        EXPECT_NEAR(grad[i].item<double>(), numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
            << what << " [" << i << "]";
      }
    }
    EXPECT_GT(layer.router.grad().abs().sum().item<double>(), 0);
  }
}

// transformers' load_balancing_loss_func, by hand: 2 sparse layers, 3 tokens of which the last
// is padding, 2 experts, 1 per token. Picks (valid tokens, both layers): expert 0 three times,
// expert 1 once, of 4 (token, layer) pairs; mean probabilities 0.6 and 0.4; the loss is
// 2 x (3/4 x 0.6 + 1/4 x 0.4) = 1.1. Uniform routing gives num_experts_per_tok.
TEST(LoadBalancingTest, MatchesTheFormulaByHand) {
  const at::Tensor valid = at::tensor(std::vector<int64_t>{1, 1, 0}).to(at::kBool);
  RouterOutputs a{at::tensor(std::vector<float>{0.7f, 0.3f, 0.9f, 0.1f, 0.0f, 1.0f}).view({3, 2}),
                  at::tensor(std::vector<int64_t>{0, 0, 1}).view({3, 1})};
  RouterOutputs b{at::tensor(std::vector<float>{0.4f, 0.6f, 0.4f, 0.6f, 1.0f, 0.0f}).view({3, 2}),
                  at::tensor(std::vector<int64_t>{1, 0, 0}).view({3, 1})};
  a.probs.requires_grad_(true);
  const at::Tensor loss =
      load_balancing_loss({router_sums(a, valid), router_sums(b, valid)}, /*valid_tokens=*/2);
  EXPECT_NEAR(loss.item<double>(), 1.1, 1e-6);
  loss.backward();
  // d loss / d probs[t, e] = num_experts x picks[e] / pairs^2 for valid tokens, 0 for padding.
  EXPECT_NEAR(a.probs.grad()[0][0].item<double>(), 2 * 3.0 / 16, 1e-6);
  EXPECT_NEAR(a.probs.grad()[1][1].item<double>(), 2 * 1.0 / 16, 1e-6);
  EXPECT_EQ(a.probs.grad()[2][0].item<double>(), 0.0);

  // 4 experts, 2 per token, each expert picked equally often with probability 1/4: loss 2.
  RouterOutputs uniform{at::full({4, 4}, 0.25),
                        at::tensor(std::vector<int64_t>{0, 1, 2, 3, 0, 2, 1, 3}).view({4, 2})};
  EXPECT_NEAR(
      load_balancing_loss({router_sums(uniform, at::ones({4}, at::kBool))}, 4).item<double>(), 2.0,
      1e-6);
}

// decoder_layer reports the router of a sparse layer: its softmax and its own top-k, whatever
// is replayed.
TEST(LoadBalancingTest, TheLayerReportsItsRouter) {
  const ModelConfig c = tiny_config("qwen3_moe");
  auto model = tiny_model(c);
  std::map<std::string, at::Tensor> weights;
  for (const auto& [n, p] : model->named_parameters()) weights[n] = p;
  auto find = [&](const std::string& n) {
    auto it = weights.find(n);
    return it == weights.end() ? at::Tensor() : it->second;
  };
  ForwardBatch batch = full_batch(kTokens);
  batch.routes = at::full({1, 12, 2, 2}, 3, at::kLong);  // replayed: every token to expert 3
  const SequenceContext context = sequence_context(c, batch, at::kFloat, at::kCPU);
  at::Generator gen = at::detail::createCPUGenerator(2);
  RouterOutputs router;
  decoder_layer(c, layer_weights(0, find), at::randn({1, 12, 32}, gen), context, &router);
  ASSERT_EQ(router.probs.sizes(), (std::vector<int64_t>{12, 4}));
  EXPECT_TRUE(at::allclose(router.probs.sum(-1), at::ones({12})));
  EXPECT_EQ(router.picked.sizes(), (std::vector<int64_t>{12, 2}));
  EXPECT_TRUE(at::equal(router.picked, std::get<1>(router.probs.topk(2, -1))));
  RouterOutputs dense;
  decoder_layer(c, layer_weights(1, find), at::randn({1, 12, 32}, gen), context, &dense);
  EXPECT_FALSE(dense.probs.defined());
}

TEST(RouteReplayTest, ReplayingTheRecordedRoutesGivesTheSameLogits) {
  auto model = tiny_model("qwen3_moe");
  at::NoGradGuard no_grad;
  RouteRecord record;
  const at::Tensor logits = model->logits(model->forward(full_batch(kTokens), nullptr, &record));
  const at::Tensor routes = record.stacked();
  ASSERT_EQ(routes.sizes(), (std::vector<int64_t>{1, 12, 2, 2}));
  EXPECT_EQ(record.replayed, 0);
  ForwardBatch replayed = full_batch(kTokens);
  replayed.routes = routes;
  RouteRecord again;
  EXPECT_TRUE(at::equal(model->logits(model->forward(replayed, nullptr, &again)), logits));
  EXPECT_EQ(again.replayed, 24);
  EXPECT_EQ(again.disagreements, 0);
  EXPECT_TRUE(at::equal(again.stacked(), routes));
  // -1 rows are routed by the router: the same routes again.
  replayed.routes = routes.clone();
  replayed.routes.narrow(1, 0, 6).fill_(-1);
  RouteRecord partly;
  EXPECT_TRUE(at::equal(model->logits(model->forward(replayed, nullptr, &partly)), logits));
  EXPECT_EQ(partly.replayed, 12);
}

TEST(RouteReplayTest, ReplayedRoutesAreUsedAndDisagreementsCounted) {
  auto model = tiny_model("qwen3_moe");
  at::NoGradGuard no_grad;
  RouteRecord record;
  const at::Tensor logits = model->logits(model->forward(full_batch(kTokens), nullptr, &record));
  at::Tensor routes = record.stacked().clone();
  // Token 4 of the first sparse layer gets the two experts the router did not pick.
  std::vector<int64_t> others;
  for (int64_t e = 0; e < 4; ++e) {
    if (!routes[0][4][0].eq(e).any().item<bool>()) others.push_back(e);
  }
  routes[0][4][0] = at::tensor(others);
  ForwardBatch replayed = full_batch(kTokens);
  replayed.routes = routes;
  RouteRecord used;
  const at::Tensor changed = model->logits(model->forward(replayed, nullptr, &used));
  EXPECT_EQ(used.disagreements, 1);
  EXPECT_TRUE(at::equal(used.stacked()[0][4][0], at::tensor(others)));
  EXPECT_TRUE(at::equal(changed.narrow(1, 0, 4), logits.narrow(1, 0, 4)));  // causal
  EXPECT_GT((changed.narrow(1, 4, 8) - logits.narrow(1, 4, 8)).abs().max().item<double>(), 1e-3);
  // The same experts in another order are the same set: no disagreement.
  routes = record.stacked().flip(3);
  replayed.routes = routes;
  RouteRecord flipped;
  model->forward(replayed, nullptr, &flipped);
  EXPECT_EQ(flipped.disagreements, 0);
}

// Rounding in bfloat16 flips some of the router's choices against float32 on the same weights:
// the disagreement R3 removes. Replaying float32's routes in bfloat16 counts them; the routes
// then used are float32's.
TEST(RouteReplayTest, Bfloat16RoutesDisagreeWithFloat32) {
  auto f32 = tiny_model("qwen3_moe", at::kFloat, 7);
  auto bf16 = tiny_model("qwen3_moe", at::kBFloat16, 7);
  at::NoGradGuard no_grad;
  const std::vector<int64_t> tokens = random_tokens(64, 97, 1);
  RouteRecord reference;
  f32->forward(full_batch(tokens), nullptr, &reference);
  ForwardBatch replayed = full_batch(tokens);
  replayed.routes = reference.stacked();
  RouteRecord record;
  bf16->forward(replayed, nullptr, &record);
  EXPECT_EQ(record.replayed, 128);
  EXPECT_GT(record.disagreements, 0);
  EXPECT_TRUE(at::equal(record.stacked(), reference.stacked()));
  std::printf("bfloat16 against float32 routes: %lld of %lld (token, layer) pairs differ\n",
              static_cast<long long>(record.disagreements),
              static_cast<long long>(record.replayed));
}

TEST(RouteReplayTest, MalformedRoutesAreRefused) {
  auto model = tiny_model("qwen3_moe");
  ForwardBatch b = full_batch(kTokens);
  b.routes = at::zeros({1, 12, 2, 3}, at::kLong);  // k is 2
  EXPECT_THROW(model->forward(b), c10::Error);
  b.routes = at::full({1, 12, 2, 2}, 4, at::kLong);  // experts are 0..3
  EXPECT_THROW(model->forward(b), c10::Error);
}

}  // namespace
}  // namespace flywheel::model
