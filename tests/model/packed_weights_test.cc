#include "flywheel/model/cpu/packed_weights.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flywheel/model/cpu/small_gemm.h"
#include "flywheel/model/decoder.h"
#include "test_models.h"

namespace flywheel::model {
namespace {

at::Tensor bf16_randn(std::vector<int64_t> sizes) { return at::randn(sizes).to(at::kBFloat16); }

// small_linear reading packed weights returns the bits it returns packing them per call, at the
// edges of the 8-row tiles, of the 16-row panels and 3-panel tiles of w, and of odd depths.
TEST(PackedWeightsTest, SmallLinearGivesTheSameBitsPackedOrNot) {
  if (!PackedWeights::used_for(at::kBFloat16)) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  EXPECT_FALSE(PackedWeights::used_for(at::kFloat));
  at::manual_seed(21);
  WorkerPool pool(2);
  PackedWeights packs;
  int checked = 0;
  for (int64_t m : {1, 7, 8, 9, 64}) {
    for (int64_t n : {1, 16, 17, 47, 48, 49, 100}) {
      for (int64_t k : {1, 2, 31, 33, 64, 101}) {
        const at::Tensor x = bf16_randn({m, k}), w = bf16_randn({n, k}), b = bf16_randn({n});
        for (at::ScalarType out : {at::kBFloat16, at::kFloat}) {
          SmallLinearOptions options{GemmIsa::kAvx512, &pool, out};
          const at::Tensor fresh = small_linear(x, w, b, options);
          options.packs = &packs;
          const at::Tensor packed = small_linear(x, w, b, options);
          EXPECT_TRUE(at::equal(packed, fresh)) << "m=" << m << " n=" << n << " k=" << k;
          // The exact sum, within float32's rounding of it (the layout is not just consistent).
          const at::Tensor exact =
              at::matmul(x.to(at::kDouble), w.to(at::kDouble).t()) + b.to(at::kDouble);
          const double tolerance = out == at::kFloat ? 1e-4 : 1.0 / 128;
          EXPECT_TRUE(at::allclose(packed.to(at::kDouble), exact, tolerance, 1e-4))
              << "m=" << m << " n=" << n << " k=" << k;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 5 * 7 * 6 * 2);
}

// A weight written in place is packed again: by its version counter (copy_), or after clear()
// for writes that bypass it. A packed copy is rewritten in place when nothing holds it.
TEST(PackedWeightsTest, RepacksAWeightChangedInPlace) {
  if (!PackedWeights::used_for(at::kBFloat16)) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  at::manual_seed(22);
  PackedWeights packs;
  const at::Tensor x = bf16_randn({5, 40});
  at::Tensor w = bf16_randn({50, 40});
  const SmallLinearOptions unpacked{GemmIsa::kAvx512, nullptr};
  SmallLinearOptions packed = unpacked;
  packed.packs = &packs;
  const at::Tensor before = small_linear(x, w, {}, packed);
  EXPECT_TRUE(at::equal(before, small_linear(x, w, {}, unpacked)));
  const void* copy = packs.panels(w).data_ptr();

  w.copy_(bf16_randn({50, 40}));  // bumps the version counter
  const at::Tensor after = small_linear(x, w, {}, packed);
  EXPECT_FALSE(at::equal(after, before));
  EXPECT_TRUE(at::equal(after, small_linear(x, w, {}, unpacked)));
  EXPECT_EQ(packs.panels(w).data_ptr(), copy);  // rewritten where it was

  // A write through the data pointer is invisible to the version counter: after clear() the
  // weight is packed again, into the same memory.
  const at::Tensor other = bf16_randn({50, 40});
  std::memcpy(w.data_ptr(), other.data_ptr(), other.nbytes());
  EXPECT_TRUE(at::equal(small_linear(x, w, {}, packed), after));  // still the old copy
  packs.clear();
  EXPECT_EQ(packs.bytes(), 2 * 64 * 40);  // kept for the next packing (50 rows: 4 panels of 16)
  EXPECT_TRUE(at::equal(small_linear(x, w, {}, packed), small_linear(x, other, {}, unpacked)));
  EXPECT_EQ(packs.panels(w).data_ptr(), copy);
  EXPECT_EQ(packs.bytes(), 2 * 64 * 40);
}

// The copies of freed weights are dropped at the next packing, so that a caller that replaces
// its weights (rather than writing them in place) does not accumulate them.
TEST(PackedWeightsTest, DropsTheCopiesOfFreedWeights) {
  if (!PackedWeights::used_for(at::kBFloat16)) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  PackedWeights packs;
  const at::Tensor kept = bf16_randn({32, 64});
  packs.panels(kept);
  const int64_t one = packs.bytes();
  EXPECT_EQ(one, 2 * 32 * 64);
  for (int i = 0; i < 3; ++i) {
    const at::Tensor passing = bf16_randn({32, 64});
    packs.panels(passing);
  }
  packs.panels(bf16_randn({32, 64}));  // a miss: drops the freed ones
  EXPECT_LE(packs.bytes(), 2 * one);
  EXPECT_THROW(packs.panels(at::randn({4, 4})), c10::Error);  // float32
}

// Past its budget a PackedWeights packs nothing more, and small_linear packs those weights per
// call, to the same bits.
TEST(PackedWeightsTest, StopsPackingPastItsBudget) {
  if (!PackedWeights::used_for(at::kBFloat16)) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  PackedWeights packs(/*max_bytes=*/3 * 2 * 32 * 64);  // three 32 x 64 weights
  std::vector<at::Tensor> weights;
  for (int i = 0; i < 4; ++i) weights.push_back(bf16_randn({32, 64}));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(packs.panels(weights[i]).defined()) << i;
  EXPECT_FALSE(packs.panels(weights[3]).defined());
  EXPECT_EQ(packs.bytes(), 3 * 2 * 32 * 64);
  weights[0].copy_(bf16_randn({32, 64}));  // repacked in place: still within the budget
  EXPECT_TRUE(packs.panels(weights[0]).defined());
  const at::Tensor x = bf16_randn({3, 64});
  SmallLinearOptions options{GemmIsa::kAvx512, nullptr};
  const at::Tensor fresh = small_linear(x, weights[3], {}, options);
  options.packs = &packs;
  EXPECT_TRUE(at::equal(small_linear(x, weights[3], {}, options), fresh));
}

// The decoder's packed weights follow its parameters: a bfloat16 model given new weights in
// place, as the engine's updates give them, computes what a model loaded with them computes.
// pack_weights packs every projection up front, and again after an update into the same memory.
TEST(PackedWeightsTest, DecoderFollowsWeightsUpdatedInPlace) {
  if (!PackedWeights::used_for(at::kBFloat16)) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  const ModelConfig config = testing::tiny_config("qwen2");
  auto updated = testing::tiny_model(config, at::kBFloat16, /*seed=*/1, /*threads=*/2);
  auto fresh = testing::tiny_model(config, at::kBFloat16, /*seed=*/2, /*threads=*/2);
  const PackedWeights* packs = updated->packed_weights();
  ASSERT_NE(packs, nullptr);
  EXPECT_EQ(packs->bytes(), 0);
  updated->pack_weights();
  // Every projection (and the head) in 16-row panels, pairs of k: nothing else.
  int64_t expected = 0;
  for (const auto& [name, p] : updated->named_parameters()) {
    if (p.dim() == 2 && name != "model.embed_tokens.weight") {
      const int64_t rows = (p.size(0) + 15) / 16 * 16, pairs = (p.size(1) + 1) / 2;
      expected += 2 * rows * pairs * 2;  // bytes
    }
  }
  EXPECT_EQ(packs->bytes(), expected);
  const at::Tensor& head = updated->lm_head_weight();
  const void* head_copy = const_cast<PackedWeights*>(packs)->panels(head).data_ptr();

  ForwardBatch batch;
  batch.tokens = at::randint(3, config.vocab_size, {2, 6}, at::kLong);
  batch.positions = at::arange(6, at::kLong).repeat({2, 1});
  batch.segment_ids = at::ones({2, 6}, at::kLong);
  at::NoGradGuard no_grad;
  const at::Tensor first = updated->logits(updated->forward(batch));
  EXPECT_EQ(packs->bytes(), expected);  // the forward packed nothing more
  const auto& params = updated->named_parameters();
  const auto& sources = fresh->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].second.copy_(sources[i].second);
  updated->merge_adapters();  // as the engine's update does
  updated->pack_weights();    // every weight was written (copy_): repacked where it was
  EXPECT_EQ(packs->bytes(), expected);
  EXPECT_EQ(const_cast<PackedWeights*>(packs)->panels(head).data_ptr(), head_copy);
  const at::Tensor second = updated->logits(updated->forward(batch));
  EXPECT_FALSE(at::equal(second, first));
  EXPECT_TRUE(at::equal(second, fresh->logits(fresh->forward(batch))));
}

}  // namespace
}  // namespace flywheel::model
