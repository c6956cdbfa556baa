#include "flywheel/rollout/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <ATen/ATen.h>

#include "gtest/gtest.h"

namespace flywheel::rollout {
namespace {

// One pointer per entry of `params`, the form truncate_logits_rows takes.
std::vector<const SamplingParams*> pointers(const std::vector<SamplingParams>& params) {
  std::vector<const SamplingParams*> out;
  for (const SamplingParams& p : params) out.push_back(&p);
  return out;
}

// Samples `draws` tokens from logits of the distribution `probs` after truncation, as the engine
// does (every draw a row of one batch: truncate_logits_rows, softmax, sample_from_probs at
// sample_uniform), and returns the empirical frequencies.
std::vector<double> frequencies(const std::vector<float>& probs, const SamplingParams& params,
                                int draws = 20000) {
  at::Tensor logits = at::log(at::tensor(probs)).expand({draws, -1}).contiguous();
  truncate_logits_rows(logits, std::vector<const SamplingParams*>(draws, &params));
  at::Tensor p = at::softmax(logits, -1);
  std::vector<double> uniforms;
  for (int i = 0; i < draws; ++i) uniforms.push_back(sample_uniform(sample_seed(123, 0), i));
  at::Tensor samples = sample_from_probs(p, at::tensor(uniforms, at::kDouble));
  std::vector<double> freq(probs.size(), 0.0);
  const int64_t* s = samples.data_ptr<int64_t>();
  for (int64_t i = 0; i < draws; ++i) freq[s[i]] += 1.0 / draws;
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

TEST(TruncationTest, RowsOfOneBatchFollowTheirOwnParameters) {
  std::vector<SamplingParams> params(5);
  params[1].top_k = 2;
  params[2].top_p = 0.75;
  params[3].min_p = 0.3;
  params[4].top_k = 3;
  params[4].min_p = 0.45;
  at::Tensor logits = at::randn({5, 50}, at::TensorOptions().dtype(at::kFloat)) * 3;
  at::Tensor batch = logits.clone();
  const std::vector<const SamplingParams*> rows = pointers(params);
  truncate_logits_rows(batch, rows);
  for (int64_t r = 0; r < 5; ++r) {
    at::Tensor alone = logits[r].clone();
    truncate_logits(alone, params[r]);
    EXPECT_TRUE(at::equal(alone, batch[r])) << "row " << r;
  }
}

// Top-p by its definition, in float64: sort descending (ties by index), drop a token once the
// probability before it reaches top_p.
at::Tensor top_p_reference(const at::Tensor& row, double top_p) {
  const int64_t vocab = row.size(0);
  at::Tensor p = at::softmax(row.to(at::kDouble), 0);
  std::vector<int64_t> order(vocab);
  for (int64_t i = 0; i < vocab; ++i) order[i] = i;
  const float* v = row.data_ptr<float>();
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  at::Tensor out = row.clone();
  double before = 0;
  const double* pd = p.data_ptr<double>();
  for (size_t j = 0; j < order.size(); ++j) {
    if (j > 0 && before >= top_p) out[order[j]] = -std::numeric_limits<float>::infinity();
    before += pd[order[j]];
  }
  return out;
}

// Flat rows (random weights: top-p keeps most of the vocabulary), peaked ones, rows with tokens
// top-k already removed (-inf) and rows of tied values: top-p without a sort keeps what the
// definition keeps, and a row whose maximum is not finite goes through the sorting path.
TEST(TruncationTest, TopPWithoutSortingKeepsTheSetItsDefinitionKeeps) {
  at::manual_seed(11);
  const int64_t vocab = 32000;
  std::vector<at::Tensor> rows = {at::randn({vocab}) * 0.3, at::randn({vocab}) * 3,
                                  at::randn({vocab}) * 30, at::round(at::randn({vocab}) * 4)};
  at::Tensor masked = at::randn({vocab});
  masked.narrow(0, 100, 20000).fill_(-std::numeric_limits<float>::infinity());
  rows.push_back(masked);
  int checked = 0;
  for (const at::Tensor& row : rows) {
    for (double top_p : {0.05, 0.5, 0.9, 0.99}) {
      SamplingParams p;
      p.top_p = top_p;
      at::Tensor mine = row.clone();
      truncate_logits(mine, p);
      const at::Tensor expected = top_p_reference(row, top_p);
      const int64_t kept = at::isfinite(mine).sum().item<int64_t>();
      const int64_t expected_kept = at::isfinite(expected).sum().item<int64_t>();
      EXPECT_EQ(kept, expected_kept) << "top_p " << top_p;
      EXPECT_TRUE(at::equal(mine, expected)) << "top_p " << top_p << ": kept " << kept;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 20);
  // A row with +inf: declined, and truncated by sorting (which keeps the +inf token).
  at::Tensor bad = at::randn({2, 50});
  bad[1][7] = std::numeric_limits<float>::infinity();
  SamplingParams p;
  p.top_p = 0.5;
  truncate_logits_rows(bad, {&p, &p});
  EXPECT_TRUE(std::isinf(bad[1][7].item<float>()) && bad[1][7].item<float>() > 0);
  EXPECT_GE(at::isfinite(bad[0]).sum().item<int64_t>(), 1);
}

// kProbs over the first 5 of 1000 tokens, the rest sharing a 1e-6 of the mass: the candidate
// sampler keeps and draws what the whole-vocabulary path would.
std::vector<double> candidate_frequencies(const SamplingParams& params, int draws = 20000) {
  std::vector<float> probs(1000, 1e-6f / 995);
  for (size_t i = 0; i < kProbs.size(); ++i) probs[i] = kProbs[i] * (1 - 1e-6f);
  at::Tensor logits = at::log(at::tensor(probs)).expand({draws, -1}).contiguous();
  std::vector<double> uniforms;
  for (int i = 0; i < draws; ++i) uniforms.push_back(sample_uniform(sample_seed(123, 0), i));
  at::Tensor tokens, logprobs;
  at::Tensor drawn =
      sample_among_candidates(logits, std::vector<const SamplingParams*>(draws, &params),
                              at::tensor(uniforms, at::kDouble), 64, &tokens, &logprobs);
  EXPECT_TRUE(drawn.all().item<bool>());
  std::vector<double> freq(kProbs.size(), 0.0);
  const int64_t* t = tokens.data_ptr<int64_t>();
  for (int64_t i = 0; i < draws; ++i) {
    EXPECT_LT(t[i], static_cast<int64_t>(kProbs.size()));
    if (t[i] < static_cast<int64_t>(kProbs.size())) freq[t[i]] += 1.0 / draws;
  }
  return freq;
}

TEST(CandidateSamplerTest, DrawsTheTruncatedDistribution) {
  SamplingParams p;
  p.top_p = 0.75;
  expect_distribution(candidate_frequencies(p), {0, 1, 2});
  p.top_p = 1.0;
  p.top_k = 2;
  expect_distribution(candidate_frequencies(p), {0, 1});
  p.top_k = 0;
  p.min_p = 0.3;
  expect_distribution(candidate_frequencies(p), {0, 1, 2});
  p.top_k = 3;
  p.min_p = 0.45;
  expect_distribution(candidate_frequencies(p), {0, 1});
}

// On peaked rows every drawn token survives the whole-vocabulary truncation and its log-prob is
// the one under that truncated, renormalised distribution; rows that need more of the vocabulary
// (flat ones, or no truncation at all) are left to the whole-vocabulary path, each row on its own.
TEST(CandidateSamplerTest, MatchesTheWholeVocabularyPathOrDeclines) {
  const int64_t vocab = 2000, candidates = 64;
  std::vector<SamplingParams> params(5);
  params[0].top_p = 0.9;
  params[1].top_k = 40;
  params[2].top_k = 50;
  params[2].top_p = 0.8;
  params[3].min_p = 0.02;
  params[4].top_p = 0.5;
  params[4].min_p = 0.1;
  const std::vector<const SamplingParams*> rows = pointers(params);
  at::manual_seed(9);
  for (int trial = 0; trial < 20; ++trial) {
    at::Tensor logits = at::randn({5, vocab}) * 10;
    at::Tensor full = logits.clone();
    truncate_logits_rows(full, rows);
    at::Tensor want = at::log_softmax(full, -1);
    std::vector<double> uniforms;
    for (int r = 0; r < 5; ++r) uniforms.push_back(sample_uniform(trial, r));
    at::Tensor tokens, logprobs;
    at::Tensor drawn = sample_among_candidates(logits, rows, at::tensor(uniforms, at::kDouble),
                                               candidates, &tokens, &logprobs);
    ASSERT_TRUE(drawn.all().item<bool>());
    for (int64_t r = 0; r < 5; ++r) {
      const float expected = want[r][tokens[r].item<int64_t>()].item<float>();
      ASSERT_TRUE(std::isfinite(expected)) << "row " << r << " drew a truncated token";
      EXPECT_NEAR(logprobs[r].item<float>(), expected, 1e-4) << "row " << r;
    }
  }
  at::Tensor flat = at::randn({5, vocab}) * 0.1;
  at::Tensor tokens, logprobs;
  std::vector<double> uniforms(5, 0.5);
  // On flat rows only those with a top-k within the candidates (rows 1 and 2) are drawn here.
  at::Tensor on_flat = sample_among_candidates(flat, rows, at::tensor(uniforms, at::kDouble),
                                               candidates, &tokens, &logprobs);
  EXPECT_TRUE(at::equal(on_flat, at::tensor(std::vector<uint8_t>{0, 1, 1, 0, 0}).to(at::kBool)))
      << on_flat;
  // Row by row: a flat row does not keep a peaked one from being drawn here.
  at::Tensor mixed = at::randn({5, vocab}) * 10;
  mixed[0] = flat[0];
  at::Tensor which = sample_among_candidates(mixed, rows, at::tensor(uniforms, at::kDouble),
                                             candidates, &tokens, &logprobs);
  EXPECT_FALSE(which[0].item<bool>());
  EXPECT_TRUE(which.narrow(0, 1, 4).all().item<bool>());
  std::vector<SamplingParams> plain(5);  // temperature alone: the whole vocabulary is kept
  const std::vector<const SamplingParams*> plain_rows = pointers(plain);
  EXPECT_FALSE(sample_among_candidates(at::randn({5, vocab}) * 10, plain_rows,
                                       at::tensor(uniforms, at::kDouble), candidates, &tokens,
                                       &logprobs)
                   .any()
                   .item<bool>());
}

// Draws `draws` rows of `logits` [V] with sample_rows at sample_uniform, and returns the
// empirical frequencies.
std::vector<double> row_frequencies(const at::Tensor& logits, const SamplingParams& params,
                                    int draws) {
  at::Tensor rows = logits.expand({draws, -1}).contiguous();
  std::vector<double> uniforms;
  for (int i = 0; i < draws; ++i) uniforms.push_back(sample_uniform(sample_seed(321, 0), i));
  at::Tensor tokens, logprobs;
  sample_rows(rows, std::vector<const SamplingParams*>(draws, &params),
              at::tensor(uniforms, at::kDouble), &tokens, &logprobs);
  std::vector<double> freq(logits.size(0), 0.0);
  const int64_t* t = tokens.data_ptr<int64_t>();
  for (int64_t i = 0; i < draws; ++i) freq[t[i]] += 1.0 / draws;
  return freq;
}

// Top-p alone is drawn without a softmax (its own pass), top-k and min-p through truncation and
// sample_from_probs: both draw the truncated, renormalised distribution.
TEST(RowSamplerTest, DrawsTheTruncatedDistribution) {
  const at::Tensor logits = at::log(at::tensor(kProbs));
  SamplingParams p;
  p.top_p = 0.75;
  expect_distribution(row_frequencies(logits, p, 20000), {0, 1, 2});
  p.top_p = 0.7;
  expect_distribution(row_frequencies(logits, p, 20000), {0, 1});
  p.top_p = 1.0;
  expect_distribution(row_frequencies(logits, p, 20000), {0, 1, 2, 3, 4});
  p.top_k = 2;
  expect_distribution(row_frequencies(logits, p, 20000), {0, 1});
  p.top_k = 0;
  p.min_p = 0.3;
  expect_distribution(row_frequencies(logits, p, 20000), {0, 1, 2});
  // 64 tokens spread over many buckets: each kept token's frequency is its renormalised
  // probability (5 standard errors), and no dropped token is drawn.
  at::manual_seed(5);
  const at::Tensor spread = at::randn({64}) * 2;
  for (double top_p : {0.8, 1.0}) {
    SamplingParams q;
    q.top_p = top_p;
    at::Tensor truncated = spread.clone();
    truncate_logits(truncated, q);
    const at::Tensor want = at::softmax(truncated.to(at::kDouble), 0);
    const int draws = 40000;
    const std::vector<double> freq = row_frequencies(spread, q, draws);
    for (int64_t i = 0; i < 64; ++i) {
      const double expected = want[i].item<double>();
      if (expected == 0) {
        EXPECT_EQ(freq[i], 0.0) << "top_p " << top_p << ": token " << i << " is truncated";
      } else {
        EXPECT_NEAR(freq[i], expected, 5 * std::sqrt(expected * (1 - expected) / draws) + 1e-4)
            << "top_p " << top_p << ": token " << i;
      }
    }
  }
}

// On 32000-token rows (flat, peaked, partly -inf): every drawn token is one truncate_logits_rows
// keeps, its log-probability is the one under that truncated, renormalised distribution, and a
// row's draw depends on that row alone (and not on whether its log-sum-exp is passed in).
TEST(RowSamplerTest, DrawsKeptTokensWithTheirLogprobsRowByRow) {
  const int64_t vocab = 32000;
  std::vector<SamplingParams> params(5);
  params[0].top_p = 0.9;
  params[1].top_p = 0.5;
  params[2].top_p = 1.0;
  params[3].top_p = 0.99;
  params[4].top_k = 100;  // the general path
  params[4].top_p = 0.9;
  const std::vector<const SamplingParams*> rows = pointers(params);
  at::manual_seed(17);
  for (int trial = 0; trial < 6; ++trial) {
    at::Tensor logits = at::randn({5, vocab}) * (trial % 2 == 0 ? 0.5 : 4.0);
    logits[3].narrow(0, 1000, 20000).fill_(-std::numeric_limits<float>::infinity());
    at::Tensor full = logits.clone();
    truncate_logits_rows(full, rows);
    const at::Tensor want = at::log_softmax(full, -1);
    std::vector<double> uniforms;
    for (int r = 0; r < 5; ++r) uniforms.push_back(sample_uniform(trial, r));
    uniforms[1] = trial == 0 ? 0.0 : uniforms[1];  // the ends of [0, 1)
    uniforms[0] = trial == 1 ? 1.0 - 0x1.0p-53 : uniforms[0];
    const at::Tensor u = at::tensor(uniforms, at::kDouble);
    at::Tensor tokens, logprobs, with_norm_tokens, with_norm_logprobs;
    sample_rows(logits, rows, u, &tokens, &logprobs);
    sample_rows(logits, rows, u, &with_norm_tokens, &with_norm_logprobs,
                at::logsumexp(logits, -1, /*keepdim=*/true));
    EXPECT_TRUE(at::equal(tokens, with_norm_tokens));
    for (int64_t r = 0; r < 5; ++r) {
      const int64_t token = tokens[r].item<int64_t>();
      ASSERT_TRUE(token >= 0 && token < vocab) << "row " << r;
      const float expected = want[r][token].item<float>();
      ASSERT_TRUE(std::isfinite(expected)) << "row " << r << " drew truncated token " << token;
      EXPECT_NEAR(logprobs[r].item<float>(), expected, 1e-4) << "row " << r;
      at::Tensor alone_tokens, alone_logprobs;
      sample_rows(logits.narrow(0, r, 1), {rows[r]}, u.narrow(0, r, 1), &alone_tokens,
                  &alone_logprobs);
      EXPECT_EQ(alone_tokens.item<int64_t>(), token) << "row " << r;
      EXPECT_EQ(alone_logprobs.item<float>(), logprobs[r].item<float>()) << "row " << r;
    }
  }
  // Rows that are not finite (+inf, NaN, all -inf) still yield a token in range: the engine
  // discards them by their logits.
  at::Tensor bad = at::randn({3, 50});
  bad[0][7] = std::numeric_limits<float>::infinity();
  bad[1][3] = std::numeric_limits<float>::quiet_NaN();
  bad[2].fill_(-std::numeric_limits<float>::infinity());
  at::Tensor tokens, logprobs;
  sample_rows(bad, {rows[0], rows[0], rows[0]}, at::tensor(std::vector<double>{0.5, 0.5, 0.5}),
              &tokens, &logprobs);
  ASSERT_EQ(tokens.size(0), 3);
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_TRUE(tokens[r].item<int64_t>() >= 0 && tokens[r].item<int64_t>() < 50) << r;
  }
}

TEST(SamplerTest, ZeroProbabilityTokensAreNeverDrawn) {
  // The largest uniform below 1 on a distribution whose last tokens are truncated away.
  at::Tensor probs = at::tensor(std::vector<float>{0.5f, 0.25f, 0.25f, 0.0f, 0.0f}).view({1, 5});
  for (double u : {0.0, 0.4999, 0.5, 0.75, 0.9999999, 1.0 - 0x1.0p-53}) {
    at::Tensor token = sample_from_probs(probs, at::tensor(std::vector<double>{u}));
    EXPECT_LT(token.item<int64_t>(), 3) << u;
  }
  at::Tensor leading_zero = at::tensor(std::vector<float>{0.0f, 1.0f}).view({1, 2});
  EXPECT_EQ(sample_from_probs(leading_zero, at::tensor(std::vector<double>{0.0})).item<int64_t>(),
            1);
}

TEST(SamplerTest, UniformsAreStableInRangeAndDifferPerPosition) {
  EXPECT_EQ(sample_uniform(7, 3), sample_uniform(7, 3));
  EXPECT_NE(sample_uniform(7, 3), sample_uniform(7, 4));
  EXPECT_NE(sample_uniform(7, 3), sample_uniform(8, 3));
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = sample_uniform(sample_seed(1, 2), i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.015);  // 5 sigma of the mean of 10^4 uniforms
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
