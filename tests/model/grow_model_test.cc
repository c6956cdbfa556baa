#include "flywheel/model/grow_model.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "flywheel/model/param_spec.h"
#include "reference_decoder.h"
#include "test_models.h"

namespace flywheel::model {
namespace {

ForwardBatch random_batch(int64_t vocab) { return testing::random_batch(vocab, 11, 5); }

// The parameter `name` of m; fails the test when m has none.
at::Tensor parameter(const DecoderModel& m, const std::string& name) {
  at::Tensor p = testing::param(m, name);
  EXPECT_TRUE(p.defined()) << "no parameter " << name;
  return p;
}

TEST(LayerIndexTest, ReadsTheLayerOfDecoderParametersOnly) {
  std::string_view rest;
  EXPECT_EQ(layer_index("model.layers.12.mlp.experts.3.down_proj.weight", &rest), 12);
  EXPECT_EQ(rest, "mlp.experts.3.down_proj.weight");
  EXPECT_EQ(layer_index("model.layers.0.input_layernorm.weight"), 0);
  for (const char* other :
       {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "model.layers.x.weight",
        "model.layers..weight", "model.layers.3", "model.layers.3x.weight", "layers.3.weight",
        "model.layers.1234567890123456789.weight"}) {
    EXPECT_EQ(layer_index(other), -1) << other;
  }
}

class GrowModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GrowModelTest, AppendedLayersLeaveTheLogitsUnchangedBitForBit) {
  const std::unique_ptr<DecoderModel> base = testing::tiny_model(GetParam());
  absl::StatusOr<std::unique_ptr<DecoderModel>> grown = grow_model(*base, GrowOptions{2, 9});
  ASSERT_TRUE(grown.ok()) << grown.status();
  const int64_t layers = base->config().num_hidden_layers;
  EXPECT_EQ((*grown)->config().num_hidden_layers, layers + 2);
  const ForwardBatch batch = random_batch(base->config().vocab_size);
  at::NoGradGuard no_grad;
  const at::Tensor want = base->logits(base->forward(batch));
  const at::Tensor got = (*grown)->logits((*grown)->forward(batch));
  EXPECT_TRUE(at::equal(want, got)) << (want - got).abs().max().item<float>();

  // The base's parameters are copied; the appended layers have random inputs and zero outputs.
  for (const auto& [name, p] : base->named_parameters()) {
    EXPECT_TRUE(at::equal(p, parameter(**grown, name))) << name;
  }
  size_t appended = 0;
  for (const auto& [name, p] : (*grown)->named_parameters()) {
    appended += name.rfind("model.layers." + std::to_string(layers) + ".", 0) == 0 ||
                name.rfind("model.layers." + std::to_string(layers + 1) + ".", 0) == 0;
  }
  EXPECT_EQ((*grown)->named_parameters().size(), base->named_parameters().size() + appended);
  EXPECT_GT(appended, 0u);
  const std::string last = "model.layers." + std::to_string(layers + 1) + ".";
  EXPECT_GT(parameter(**grown, last + "self_attn.q_proj.weight").abs().max().item<float>(), 0);
  EXPECT_EQ(parameter(**grown, last + "self_attn.o_proj.weight").abs().max().item<float>(), 0);
  int zero_down = 0;
  for (const auto& [name, p] : (*grown)->named_parameters()) {
    if (name.rfind(last, 0) == 0 && name.find("down_proj.weight") != std::string::npos) {
      EXPECT_EQ(p.abs().max().item<float>(), 0) << name;
      ++zero_down;
    }
  }
  EXPECT_GE(zero_down, 1);
}

INSTANTIATE_TEST_SUITE_P(Families, GrowModelTest,
                         ::testing::Values("qwen2", "qwen3", "llama", "qwen3_moe"));

TEST(GrowModelTest, TheAppendedLayersLearn) {
  // Zero output projections stop no gradient: o_proj's own is not zero, so the first update
  // moves it, and the layer's other projections follow.
  const std::unique_ptr<DecoderModel> base = testing::tiny_model("qwen2");
  std::unique_ptr<DecoderModel> grown = std::move(*grow_model(*base, GrowOptions{1, 3}));
  const std::string layer = "model.layers." + std::to_string(base->config().num_hidden_layers);
  at::Tensor o_proj = parameter(*grown, layer + ".self_attn.o_proj.weight");
  at::Tensor q_proj = parameter(*grown, layer + ".self_attn.q_proj.weight");
  o_proj.set_requires_grad(true);
  q_proj.set_requires_grad(true);
  const ForwardBatch batch = random_batch(grown->config().vocab_size);
  grown->logits(grown->forward(batch)).logsumexp(-1).sum().backward();
  ASSERT_TRUE(o_proj.grad().defined());
  EXPECT_GT(o_proj.grad().abs().max().item<float>(), 0);
  // q_proj's gradient flows through o_proj, zero until o_proj moves.
  if (q_proj.grad().defined()) {
    EXPECT_EQ(q_proj.grad().abs().max().item<float>(), 0);
  }
}

TEST(GrowModelTest, RefusesNoLayersAndAdapters) {
  const std::unique_ptr<DecoderModel> base = testing::tiny_model("qwen2");
  absl::StatusOr<std::unique_ptr<DecoderModel>> none = grow_model(*base, GrowOptions{0, 1});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("add_layers must be >= 1"), std::string::npos);

  LoraOptions lora;
  lora.rank = 4;
  lora.targets = {"q_proj"};
  absl::StatusOr<std::unique_ptr<DecoderModel>> adapted =
      DecoderModel::create(base->config(), DecoderOptions{at::kFloat, at::kCPU, 0, lora});
  ASSERT_TRUE(adapted.ok()) << adapted.status();
  absl::StatusOr<std::unique_ptr<DecoderModel>> refused = grow_model(**adapted, GrowOptions{1, 1});
  EXPECT_NE(refused.status().message().find("merge them first"), std::string::npos);
}

}  // namespace
}  // namespace flywheel::model
