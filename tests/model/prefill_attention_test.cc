#include "flywheel/model/cpu/prefill_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace flywheel::model {
namespace {

// The batched form the decoder used before: every row's scores at once, masked, soft-maxed.
at::Tensor batched(const PrefillAttentionInputs& in) {
  const int64_t B = in.q.size(0), T = in.q.size(1), heads = in.q.size(2), hd = in.q.size(3);
  const int64_t kvh = in.keys.size(1), L = in.keys.size(2), groups = heads / kvh;
  at::Tensor qg = in.q.view({B, T, kvh, groups, hd})
                      .permute({0, 2, 3, 1, 4})
                      .reshape({B, kvh, groups * T, hd})
                      .to(at::kFloat);
  at::Tensor scores = at::matmul(qg, in.keys.to(at::kFloat).transpose(-1, -2)) * in.scale;
  scores = scores.view({B, kvh, groups, T, L})
               .masked_fill(in.mask.logical_not().view({B, 1, 1, T, L}),
                            -std::numeric_limits<float>::infinity());
  at::Tensor probs = at::softmax(scores, -1).to(in.q.scalar_type()).view({B, kvh, groups * T, L});
  return at::matmul(probs, in.values)
      .view({B, kvh, groups, T, hd})
      .permute({0, 3, 1, 2, 4})
      .reshape({B, T, -1});
}

// Rows of different prompt lengths, each padded to T: query t of row b reads keys 0 .. t while t
// is within the row's length; padding queries read key 0 only (as a cache forward's padding,
// whose positions are 0).
PrefillAttentionInputs inputs(at::ScalarType dtype, int64_t heads, int64_t kvh, int64_t T) {
  const int64_t B = 3, hd = 16;
  PrefillAttentionInputs in;
  in.q = at::randn({B, T, heads, hd}).to(dtype);
  // Keys as the decoder passes them: a permuted view of [B, T, kvh, hd].
  in.keys = at::randn({B, T, kvh, hd}).to(dtype).permute({0, 2, 1, 3});
  in.values = at::randn({B, T, kvh, hd}).to(dtype).permute({0, 2, 1, 3});
  const int64_t lengths[B] = {T, T / 2, 1};
  in.mask = at::zeros({B, T, T}, at::kBool);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t last = t < lengths[b] ? t : 0;
      in.mask[b][t].narrow(0, 0, last + 1).fill_(true);
    }
  }
  in.scale = 1.0 / std::sqrt(static_cast<double>(hd));
  return in;
}

// The pool takes the tasks only where ATen runs each op on one thread (as in flywheel's thread
// layouts).
class PrefillAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_ = at::get_num_threads();
    at::set_num_threads(1);
  }
  void TearDown() override { at::set_num_threads(threads_); }
  int threads_ = 1;
};

TEST_F(PrefillAttentionTest, MatchesTheBatchedFormByChunksOfEverySize) {
  at::manual_seed(11);
  WorkerPool pool(3);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (auto [heads, kvh] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {6, 2}}) {
      const PrefillAttentionInputs in = inputs(dtype, heads, kvh, 37);
      const at::Tensor expected = batched(in).to(at::kFloat);
      // One query token per chunk, a few, and the whole prompt in one chunk.
      for (int64_t chunk_scores : {int64_t{1}, int64_t{heads * 37 * 5}, int64_t{1} << 20}) {
        PrefillAttentionOptions options;
        options.chunk_scores = chunk_scores;
        options.pool = &pool;
        const at::Tensor ours = prefill_attention(in, options);
        ASSERT_EQ(ours.sizes(), expected.sizes());
        ASSERT_EQ(ours.scalar_type(), dtype);
        const double tolerance = dtype == at::kFloat ? 1e-5 : 2e-2;
        EXPECT_TRUE(at::allclose(ours.to(at::kFloat), expected, tolerance, tolerance))
            << c10::toString(dtype) << " heads " << heads << "/" << kvh << " chunk_scores "
            << chunk_scores << ": " << (ours.to(at::kFloat) - expected).abs().max();
        options.pool = nullptr;
        EXPECT_TRUE(at::equal(ours, prefill_attention(in, options)))
            << "results must not depend on the thread count";
      }
    }
  }
}

// Masks with holes (segments packed in one row, as a training batch's) and more keys than query
// tokens (a prefill after cached tokens), chunked and on the pool's threads under InferenceMode
// (whose thread-local state the workers must share to write the output).
TEST_F(PrefillAttentionTest, MatchesTheBatchedFormForSegmentsAndCachedKeysInInferenceMode) {
  at::manual_seed(12);
  const int64_t B = 2, T = 9, L = 14, heads = 4, kvh = 2, hd = 8;
  PrefillAttentionInputs in;
  in.q = at::randn({B, T, heads, hd});
  in.keys = at::randn({B, kvh, L, hd});
  in.values = at::randn({B, kvh, L, hd});
  in.scale = 0.3;
  in.mask = at::zeros({B, T, L}, at::kBool);
  for (int64_t t = 0; t < T; ++t) {
    // Row 0: five cached keys, then the causal prefill. Row 1: two segments (0-3, 4-8) with
    // nothing cached, each reading only its own keys.
    in.mask[0][t].narrow(0, 0, 5 + t + 1).fill_(true);
    const int64_t first = t < 4 ? 0 : 4;
    in.mask[1][t].narrow(0, first, t - first + 1).fill_(true);
  }
  const at::Tensor expected = batched(in);
  WorkerPool pool(3);
  PrefillAttentionOptions options;
  options.chunk_scores = heads * L * 2;  // two query tokens per task
  options.pool = &pool;
  c10::InferenceMode inference;
  const at::Tensor ours = prefill_attention(in, options);
  EXPECT_TRUE(at::allclose(ours, expected, 1e-5, 1e-5)) << (ours - expected).abs().max();
}

TEST_F(PrefillAttentionTest, AQueryThatMayReadNothingGetsNaNAsTheBatchedSoftmaxGives) {
  PrefillAttentionInputs in = inputs(at::kFloat, 2, 2, 4);
  in.mask[1][2].fill_(false);
  const at::Tensor ours = prefill_attention(in);
  EXPECT_TRUE(at::isnan(ours[1][2]).all().item<bool>());
  EXPECT_FALSE(at::isnan(ours[1][1]).any().item<bool>());
  EXPECT_FALSE(at::isnan(ours[0]).any().item<bool>());
}

TEST_F(PrefillAttentionTest, RejectsInconsistentShapesWithAnErrorNamingThem) {
  PrefillAttentionInputs in = inputs(at::kFloat, 4, 2, 5);
  PrefillAttentionInputs bad = in;
  bad.mask = in.mask.narrow(2, 0, 4);
  EXPECT_THROW(prefill_attention(bad), c10::Error);
  bad = in;
  bad.keys = in.keys.narrow(1, 0, 1).expand({3, 3, 5, 16});
  EXPECT_THROW(prefill_attention(bad), c10::Error);
  bad = in;
  bad.mask = in.mask.to(at::kFloat);
  try {
    prefill_attention(bad);
    FAIL() << "a float mask was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("bool mask"), std::string::npos);
  }
}

}  // namespace
}  // namespace flywheel::model
