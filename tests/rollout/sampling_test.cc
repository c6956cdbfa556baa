#include "flywheel/rollout/sampling.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

// Samples `draws` tokens from logits of the distribution `probs` after truncation and returns
// the empirical frequencies.
std::vector<double> frequencies(const std::vector<float>& probs, const SamplingParams& params,
                                int draws = 20000) {
  at::Tensor logits = at::log(at::tensor(probs));
  truncate_logits(logits, params);
  at::Tensor p = at::softmax(logits, -1);
  at::Generator gen = at::detail::createCPUGenerator(123);
  at::Tensor samples = at::multinomial(p, draws, /*replacement=*/true, gen);
  std::vector<double> freq(probs.size(), 0.0);
  for (int64_t i = 0; i < draws; ++i) freq[samples[i].item<int64_t>()] += 1.0 / draws;
  return freq;
}

const std::vector<float> kProbs = {0.4f, 0.3f, 0.15f, 0.1f, 0.05f};

// Expected renormalised probabilities over `kept`; others exactly zero.
void expect_distribution(const std::vector<double>& freq, const std::vector<int>& kept) {
  double mass = 0;
  for (int i : kept) mass += kProbs[i];
  for (size_t i = 0; i < kProbs.size(); ++i) {
    bool in = std::find(kept.begin(), kept.end(), static_cast<int>(i)) != kept.end();
    if (!in) {
      EXPECT_EQ(freq[i], 0.0) << "token " << i << " should be truncated";
    } else {
      // 20000 draws: standard error <= 0.0036; allow 5 sigma.
      EXPECT_NEAR(freq[i], kProbs[i] / mass, 0.018) << "token " << i;
    }
  }
}

TEST(TruncationTest, TopKKeepsTheKMostLikely) {
  SamplingParams p;
  p.top_k = 2;
  expect_distribution(frequencies(kProbs, p), {0, 1});
}

TEST(TruncationTest, TopPKeepsTheSmallestSetReachingP) {
  SamplingParams p;
  p.top_p = 0.7;  // 0.4 + 0.3 reaches 0.7 exactly: tokens 0 and 1
  expect_distribution(frequencies(kProbs, p), {0, 1});
  p.top_p = 0.75;  // needs the third token
  expect_distribution(frequencies(kProbs, p), {0, 1, 2});
  p.top_p = 0.1;  // the most likely token always survives
  expect_distribution(frequencies(kProbs, p), {0});
}

TEST(TruncationTest, MinPDropsTokensBelowAFractionOfTheTop) {
  SamplingParams p;
  p.min_p = 0.3;  // threshold 0.12
  expect_distribution(frequencies(kProbs, p), {0, 1, 2});
}

TEST(TruncationTest, FiltersComposeInHuggingFaceOrder) {
  SamplingParams p;
  p.top_k = 3;     // {0.4, 0.3, 0.15} -> renormalised {0.47, 0.35, 0.18}
  p.min_p = 0.45;  // threshold 0.21 on the renormalised top: drops 0.18
  expect_distribution(frequencies(kProbs, p), {0, 1});
}

TEST(TruncationTest, NoFiltersKeepsTheDistribution) {
  expect_distribution(frequencies(kProbs, SamplingParams()), {0, 1, 2, 3, 4});
}

TEST(SamplingParamsTest, ValidationNamesTheField) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_NE(std::string(p.validate().message()).find("top_p"), std::string::npos);
  p = SamplingParams();
  p.min_p = 1.5;
  EXPECT_FALSE(p.validate().ok());
  p = SamplingParams();
  p.max_new_tokens = 0;
  EXPECT_FALSE(p.validate().ok());
  EXPECT_TRUE(SamplingParams().validate().ok());
}

TEST(SamplingParamsTest, SampleSeedsDifferPerIndexAndAreStable) {
  EXPECT_EQ(sample_seed(1, 0), sample_seed(1, 0));
  EXPECT_NE(sample_seed(1, 0), sample_seed(1, 1));
  EXPECT_NE(sample_seed(1, 0), sample_seed(2, 0));
}

}  // namespace
}  // namespace flywheel::rollout
