#include "flywheel/model/cpu/decode_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace flywheel::model {
namespace {

// The same attention in LibTorch, row by row: scores, softmax, weighted values.
at::Tensor reference(const DecodeAttentionInputs& in) {
  const int64_t rows = in.q.size(0), heads = in.q.size(1), hd = in.q.size(2);
  const int64_t groups = heads / in.keys.size(1);
  at::Tensor out = at::zeros({rows, heads, hd}, at::kDouble);
  for (int64_t b = 0; b < rows; ++b) {
    if (in.lengths[b] == 0) continue;
    for (int64_t h = 0; h < heads; ++h) {
      at::Tensor k = in.keys[in.slots[b]][h / groups].narrow(0, 0, in.lengths[b]).to(at::kDouble);
      at::Tensor v = in.values[in.slots[b]][h / groups].narrow(0, 0, in.lengths[b]).to(at::kDouble);
      at::Tensor p = at::softmax(at::mv(k, in.q[b][h].to(at::kDouble)) * in.scale, 0);
      out[b][h] = at::mv(v.t(), p);
    }
  }
  return out.view({rows, heads * hd}).to(at::kFloat);
}

DecodeAttentionInputs random_inputs(int64_t rows, int64_t heads, int64_t kv_heads, int64_t hd,
                                    int64_t max_len) {
  DecodeAttentionInputs in;
  in.q = at::randn({rows, heads, hd});
  in.keys = at::randn({rows + 2, kv_heads, max_len, hd});
  in.values = at::randn({rows + 2, kv_heads, max_len, hd});
  for (int64_t b = 0; b < rows; ++b) {
    in.slots.push_back((b * 5 + 1) % (rows + 2));
    // Every length from 0 (a padding row) to the whole slot.
    in.lengths.push_back(b == 0 ? 0 : (b == 1 ? max_len : 1 + (b * 7) % max_len));
  }
  in.scale = 1.0 / std::sqrt(static_cast<double>(hd));
  return in;
}

TEST(DecodeAttentionTest, MatchesLibTorchForEveryIsaHeadLayoutAndLength) {
  std::vector<GemmIsa> isas;
  for (GemmIsa isa : {GemmIsa::kAvx512, GemmIsa::kAvx2}) {
    if (gemm_isa_supported(isa)) isas.push_back(isa);
  }
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  at::manual_seed(5);
  WorkerPool pool(3);
  for (GemmIsa isa : isas) {
    // Groups of 1, 2 and 3 query heads per kv head; head sizes around the vector widths.
    for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {6, 2}}) {
      for (int64_t hd : {8, 20, 64}) {
        const DecodeAttentionInputs in = random_inputs(7, heads, kv_heads, hd, 13);
        at::Tensor out = decode_attention(in, {isa, &pool});
        EXPECT_TRUE(at::allclose(out, reference(in), 1e-5, 1e-5))
            << gemm_isa_name(isa) << " heads " << heads << "/" << kv_heads << " hd " << hd << ": "
            << (out - reference(in)).abs().max().item<double>();
      }
    }
  }
}

// bfloat16 q and cache: scores from vdpbf16ps (AVX512-BF16, as kAvx512) or the same products
// widened to float32 (AVX2), a float32 softmax and float32 sums of the values, each output
// rounded to bfloat16 once. The reference runs in double on the same bfloat16 values, so the
// difference is that one rounding (2^-8 relative) and float32 noise.
TEST(DecodeAttentionTest, Bf16MatchesTheDoubleReferenceOnBf16InputsForEveryKernel) {
  std::vector<GemmIsa> isas;
  if (avx512_bf16_supported()) isas.push_back(GemmIsa::kAvx512);
  if (gemm_isa_supported(GemmIsa::kAvx2)) isas.push_back(GemmIsa::kAvx2);
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AVX2";
  at::manual_seed(8);
  WorkerPool pool(3);
  for (GemmIsa isa : isas) {
    for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {6, 2}}) {
      // Head sizes below, at and past the 16- and 32-element steps and the 8- and 16-lane
      // widening.
      for (int64_t hd : {8, 20, 32, 64, 80}) {
        DecodeAttentionInputs in = random_inputs(7, heads, kv_heads, hd, 13);
        in.q = in.q.to(at::kBFloat16);
        in.keys = in.keys.to(at::kBFloat16);
        in.values = in.values.to(at::kBFloat16);
        at::Tensor out = decode_attention(in, {isa, &pool});
        ASSERT_EQ(out.scalar_type(), at::kBFloat16);
        const at::Tensor expected = reference(in);
        EXPECT_TRUE(at::allclose(out.to(at::kFloat), expected, 1.0 / 128, 1e-3))
            << gemm_isa_name(isa) << " heads " << heads << "/" << kv_heads << " hd " << hd << ": "
            << (out.to(at::kFloat) - expected).abs().max().item<double>();
        // 1 thread: the same bits.
        EXPECT_TRUE(at::equal(out, decode_attention(in, {isa, nullptr})));
      }
    }
  }
  DecodeAttentionInputs mixed = random_inputs(3, 4, 2, 8, 5);
  mixed.q = mixed.q.to(at::kBFloat16);  // a float32 cache
  EXPECT_THROW(decode_attention(mixed), c10::Error);
}

// Slots long enough for the prefetch ahead of the keys and values (16 keys) and for several of
// softmax's 16-lane passes, with lengths that end inside and outside a block of four keys.
TEST(DecodeAttentionTest, MatchesLibTorchOnLongSlots) {
  if (!gemm_isa_supported(GemmIsa::kAuto)) GTEST_SKIP() << "no AVX2 or AVX-512";
  at::manual_seed(9);
  WorkerPool pool(2);
  DecodeAttentionInputs in = random_inputs(5, 12, 4, 64, 300);
  in.lengths = {300, 257, 64, 21, 130};
  const at::Tensor out = decode_attention(in, {GemmIsa::kAuto, &pool});
  EXPECT_TRUE(at::allclose(out, reference(in), 1e-5, 1e-5))
      << (out - reference(in)).abs().max().item<double>();
}

// A NaN in a row's keys makes its heads' outputs NaN, as LibTorch's softmax would: never a
// probability of 0 that hides it.
TEST(DecodeAttentionTest, ANaNKeyGivesNaNNotAnIgnoredKey) {
  if (!gemm_isa_supported(GemmIsa::kAuto)) GTEST_SKIP() << "no AVX2 or AVX-512";
  DecodeAttentionInputs in = random_inputs(3, 4, 2, 16, 40);
  in.slots = {0, 1, 2};
  in.lengths = {40, 40, 40};
  in.keys[1][0][7][3] = NAN;  // row 1, kv head 0: query heads 0 and 1
  const at::Tensor out = decode_attention(in).view({3, 4, 16});
  EXPECT_TRUE(at::isnan(out[1].narrow(0, 0, 2)).all().item<bool>());
  EXPECT_FALSE(at::isnan(out[1].narrow(0, 2, 2)).any().item<bool>());
  EXPECT_FALSE(at::isnan(out[0]).any().item<bool>());
}

TEST(DecodeAttentionTest, ResultsDoNotDependOnTheThreadCount) {
  if (!gemm_isa_supported(GemmIsa::kAuto)) GTEST_SKIP() << "no AVX2 or AVX-512";
  const DecodeAttentionInputs in = random_inputs(9, 6, 2, 64, 40);
  at::Tensor one = decode_attention(in);
  for (int threads : {2, 4}) {
    WorkerPool pool(threads);
    EXPECT_TRUE(at::equal(decode_attention(in, {GemmIsa::kAuto, &pool}), one));
  }
}

// A prefill: consecutive rows of one slot (one per token, lengths 1, 2, ...) run together, a
// block of keys read once for all of them; each row's result is bit for bit its own alone, for
// every ISA and thread count (what makes the engine's prefill and decode steps, and the
// learner's proximal pass, agree: docs/rollout.md "Equal log-probs"). Also against LibTorch.
TEST(DecodeAttentionTest, RowsOfOneSlotEqualEachRowAloneBitForBit) {
  if (!gemm_isa_supported(GemmIsa::kAuto)) GTEST_SKIP() << "no AVX2 or AVX-512";
  at::manual_seed(9);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    if (!small_gemm_supports(dtype)) continue;
    for (GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
      if (!gemm_isa_supported(isa)) continue;
      const int64_t T = 27, heads = 6, kv_heads = 2, hd = 40, max_len = 30;
      DecodeAttentionInputs in;
      in.q = at::randn({T + 2, heads, hd}).to(dtype);
      in.keys = at::randn({3, kv_heads, max_len, hd}).to(dtype);
      in.values = at::randn({3, kv_heads, max_len, hd}).to(dtype);
      // Slot 1's prefill (T tokens), one padding row, then a decode row of slot 2.
      for (int64_t t = 0; t < T; ++t) {
        in.slots.push_back(1);
        in.lengths.push_back(t + 1);
      }
      in.slots.insert(in.slots.end(), {1, 2});
      in.lengths.insert(in.lengths.end(), {0, 13});
      in.scale = 1.0 / std::sqrt(static_cast<double>(hd));
      WorkerPool pool(3);
      const at::Tensor together = decode_attention(in, {isa, &pool});
      EXPECT_TRUE(at::equal(together, decode_attention(in, {isa, nullptr})));
      for (int64_t b = 0; b < T + 2; ++b) {
        DecodeAttentionInputs alone = in;
        alone.q = in.q.narrow(0, b, 1).contiguous();
        alone.slots = {in.slots[b]};
        alone.lengths = {in.lengths[b]};
        EXPECT_TRUE(at::equal(decode_attention(alone, {isa, nullptr})[0], together[b]))
            << c10::toString(dtype) << " row " << b;
      }
      if (dtype == at::kFloat) {
        EXPECT_TRUE(at::allclose(together, reference(in), 1e-5, 1e-5));
      }
    }
  }
}

TEST(DecodeAttentionTest, RejectsInconsistentInputs) {
  if (!gemm_isa_supported(GemmIsa::kAuto)) GTEST_SKIP() << "no AVX2 or AVX-512";
  DecodeAttentionInputs in = random_inputs(3, 4, 2, 8, 5);
  in.lengths[1] = 6;  // past max_len
  EXPECT_THROW(decode_attention(in), c10::Error);
  in = random_inputs(3, 4, 2, 8, 5);
  in.slots[2] = 5;  // the cache has 5 slots
  EXPECT_THROW(decode_attention(in), c10::Error);
  in = random_inputs(3, 4, 2, 8, 5);
  in.slots.pop_back();
  EXPECT_THROW(decode_attention(in), c10::Error);
  in = random_inputs(3, 3, 2, 8, 5);  // 3 heads do not group over 2 kv heads
  EXPECT_THROW(decode_attention(in), c10::Error);
}

}  // namespace
}  // namespace flywheel::model
