#include "flywheel/model/kv_cache.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "test_models.h"

namespace flywheel::model {
namespace {

using at::indexing::Slice;

std::unique_ptr<KvCache> make_cache(at::ScalarType dtype) {
  const ModelConfig config = testing::tiny_config("qwen2");  // 2 layers, 2 kv heads of 16
  absl::StatusOr<std::unique_ptr<KvCache>> cache =
      KvCache::create(config, /*slots=*/3, /*max_len=*/8, at::TensorOptions().dtype(dtype));
  EXPECT_TRUE(cache.ok()) << cache.status();
  return std::move(*cache);
}

// write_rows is the decode path's index_put_: rows picked out of [B * T] tokens (padding
// skipped), written to their slots and positions, in float32 and bfloat16.
TEST(KvCacheTest, WriteRowsEqualsIndexPut) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    std::unique_ptr<KvCache> cache = make_cache(dtype);
    at::Tensor expected_k = cache->keys(1).clone(), expected_v = cache->values(1).clone();
    at::manual_seed(3);
    const at::Tensor k = at::randn({2, 3, 2, 16}).to(dtype);  // [B, T, kv_heads, head_dim]
    const at::Tensor v = at::randn({2, 3, 2, 16}).to(dtype);
    // Row 0: tokens 0 and 1 (token 2 is padding) to slot 2 at 4 and 5; row 1: all 3 to slot 0.
    const std::vector<int64_t> sources = {0, 1, 3, 4, 5}, slots = {2, 2, 0, 0, 0},
                               positions = {4, 5, 0, 1, 7};
    cache->write_rows(1, k, v, sources, slots, positions);
    const at::Tensor rows = at::tensor(sources, at::kLong);
    const at::Tensor at_slots = at::tensor(slots, at::kLong);
    const at::Tensor at_positions = at::tensor(positions, at::kLong);
    expected_k.index_put_({at_slots, Slice(), at_positions},
                          k.reshape({6, 2, 16}).index_select(0, rows));
    expected_v.index_put_({at_slots, Slice(), at_positions},
                          v.reshape({6, 2, 16}).index_select(0, rows));
    EXPECT_TRUE(at::equal(cache->keys(1), expected_k)) << dtype;
    EXPECT_TRUE(at::equal(cache->values(1), expected_v)) << dtype;
    EXPECT_EQ(cache->keys(0).count_nonzero().item<int64_t>(), 0) << "another layer written";
  }
}

// A row outside the cache or the input is refused before anything is written; so is a dtype
// other than the cache's.
TEST(KvCacheTest, WriteRowsRefusesRowsOutsideAndOtherDtypes) {
  std::unique_ptr<KvCache> cache = make_cache(at::kFloat);
  const at::Tensor k = at::ones({2, 2, 16}), v = at::ones({2, 2, 16});
  auto refused = [&](const std::vector<int64_t>& sources, const std::vector<int64_t>& slots,
                     const std::vector<int64_t>& positions, const std::string& what) {
    try {
      cache->write_rows(0, k, v, sources, slots, positions);
      ADD_FAILURE() << what << ": not refused";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("outside the cache or the input"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(cache->keys(0).count_nonzero().item<int64_t>(), 0) << what << ": written";
  };
  refused({0, 1}, {0, 3}, {0, 0}, "slot 3 of 3");
  refused({0, 1}, {0, 1}, {0, 8}, "position 8 of 8");
  refused({0, 2}, {0, 1}, {0, 0}, "source 2 of 2 rows");
  refused({0, -1}, {0, 1}, {0, 0}, "a negative source");
  EXPECT_THROW(cache->write_rows(0, k.to(at::kBFloat16), v.to(at::kBFloat16), {0}, {0}, {0}),
               c10::Error);
  EXPECT_THROW(cache->write_rows(0, k, v, {0, 1}, {0}, {0}), c10::Error);
}

}  // namespace
}  // namespace flywheel::model
