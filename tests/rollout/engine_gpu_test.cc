// The engine on CUDA (label gpu; scripts/gpu_check.sh runs it on a machine with a GPU): the same
// requests as on the CPU, with the same seeds. In float32, greedy and sampled tokens equal the
// CPU engine's and behaviour log-probs stay within 1e-3; in bfloat16, logits stay within the bf16
// tolerance decoder_test states (0.25 at worst, 0.05 on average).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "engine_test_util.h"
#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

// `cpu`'s weights in a model of `dtype` on `device`.
std::shared_ptr<model::DecoderModel> copy_to(const model::DecoderModel& cpu, at::ScalarType dtype,
                                             at::Device device) {
  auto created = model::DecoderModel::create(cpu.config(), model::DecoderOptions{dtype, device});
  EXPECT_TRUE(created.ok()) << created.status();
  std::map<std::string, at::Tensor> weights(cpu.named_parameters().begin(),
                                            cpu.named_parameters().end());
  absl::Status loaded =
      (*created)->load([&](const std::string& name) -> absl::StatusOr<at::Tensor> {
        auto it = weights.find(name);
        if (it == weights.end()) return absl::NotFoundError(name);
        return it->second;
      });
  EXPECT_TRUE(loaded.ok()) << loaded;
  return std::shared_ptr<model::DecoderModel>(created->release());
}

// Every prompt of kPrompts, greedy ("g<i>") and sampled at temperature 1, top-p 0.9, 3 samples
// ("s<i>", seed i).
std::map<std::string, GroupResult> generate(std::shared_ptr<model::DecoderModel> model) {
  auto engine = make_engine(std::move(model));
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_TRUE(engine->submit(greedy("g" + std::to_string(i), kPrompts[i], 12)).ok());
    GenerationRequest sampled = greedy("s" + std::to_string(i), kPrompts[i], 12);
    sampled.sampling.temperature = 1.0;
    sampled.sampling.top_p = 0.9;
    sampled.sampling.seed = i;
    sampled.n = 3;
    EXPECT_TRUE(engine->submit(sampled).ok());
  }
  return by_id(engine->run_until_idle());
}

class EngineGpuTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(EngineGpuTest, Float32TokensAndLogprobsEqualTheCpu) {
  auto cpu = shared_model(GetParam());
  auto cuda = copy_to(*cpu, at::kFloat, at::Device(at::kCUDA, 0));
  std::map<std::string, GroupResult> expected = generate(cpu), got = generate(cuda);
  ASSERT_EQ(got.size(), expected.size());
  double max_delta = 0;
  for (const auto& [id, group] : expected) {
    ASSERT_EQ(got[id].samples.size(), group.samples.size()) << id;
    for (size_t s = 0; s < group.samples.size(); ++s) {
      const Sample& want = group.samples[s];
      const Sample& have = got[id].samples[s];
      ASSERT_EQ(have.token_ids, want.token_ids) << GetParam() << " " << id << " sample " << s;
      ASSERT_EQ(have.logprobs.size(), want.logprobs.size());
      for (size_t t = 0; t < want.logprobs.size(); ++t) {
        max_delta = std::max(max_delta, std::abs(double(have.logprobs[t]) - want.logprobs[t]));
      }
    }
  }
  std::printf("%s float32: max |logp(cuda) - logp(cpu)| = %.3g over %zu groups\n", GetParam(),
              max_delta, expected.size());
  EXPECT_LE(max_delta, 1e-3);
}

TEST_P(EngineGpuTest, Bfloat16LogitsStayWithinTheBf16Tolerance) {
  auto cpu = shared_model(GetParam());
  auto cuda = copy_to(*cpu, at::kBFloat16, at::Device(at::kCUDA, 0));
  const std::vector<int64_t> tokens = kPrompts[3];
  model::ForwardBatch batch;
  const int64_t T = tokens.size();
  batch.tokens = at::tensor(tokens, at::kLong).view({1, T});
  batch.positions = at::arange(T, at::kLong).view({1, T});
  at::NoGradGuard no_grad;
  at::Tensor want = cpu->logits(cpu->forward(batch));
  at::Tensor have = cuda->logits(cuda->forward(batch)).to(at::kCPU);
  const double worst = (want - have).abs().max().item<double>();
  const double mean = (want - have).abs().mean().item<double>();
  std::printf("%s bfloat16: |logits(cuda) - logits(cpu float32)| max %.3g, mean %.3g\n", GetParam(),
              worst, mean);
  EXPECT_LT(worst, 0.25);
  EXPECT_LT(mean, 0.05);
  // And the engine generates with it: every request finishes without an error.
  for (const auto& [id, group] : generate(cuda)) {
    for (const Sample& s : group.samples) EXPECT_NE(s.finish_reason, FinishReason::kError) << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, EngineGpuTest, ::testing::Values("qwen2", "qwen3", "llama"));

}  // namespace
}  // namespace flywheel::rollout
