#include "flywheel/model/kv_cache.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"

namespace flywheel::model {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::create(const ModelConfig& config, int64_t slots,
                                                         int64_t max_len,
                                                         const at::TensorOptions& options) {
  if (slots <= 0 || max_len <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache needs positive slots and max_len, got ", slots, " and ", max_len));
  }
  std::unique_ptr<KvCache> cache(new KvCache(slots, max_len));
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    cache->keys_.push_back(
        at::zeros({slots, config.num_key_value_heads, max_len, config.head_dim}, options));
    cache->values_.push_back(
        at::zeros({slots, config.num_key_value_heads, max_len, config.head_dim}, options));
  }
  return cache;
}

void KvCache::copy_prefix(int64_t from, int64_t to, int64_t length) {
  if (from == to || length <= 0) return;
  for (size_t l = 0; l < keys_.size(); ++l) {
    keys_[l][to].narrow(1, 0, length).copy_(keys_[l][from].narrow(1, 0, length));
    values_[l][to].narrow(1, 0, length).copy_(values_[l][from].narrow(1, 0, length));
  }
}

void KvCache::clear(int64_t slot, int64_t begin, int64_t end) {
  begin = std::max<int64_t>(begin, 0);
  end = std::min(end, max_len_);
  if (end <= begin) return;
  for (size_t l = 0; l < keys_.size(); ++l) {
    keys_[l][slot].narrow(1, begin, end - begin).zero_();
    values_[l][slot].narrow(1, begin, end - begin).zero_();
  }
}

}  // namespace flywheel::model
