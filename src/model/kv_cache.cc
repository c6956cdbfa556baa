#include "flywheel/model/kv_cache.h"

#include <algorithm>
#include <cstring>

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

void KvCache::write_rows(int64_t layer, const at::Tensor& k, const at::Tensor& v,
                         const std::vector<int64_t>& sources, const std::vector<int64_t>& slots,
                         const std::vector<int64_t>& positions) {
  at::Tensor& keys = keys_[layer];
  at::Tensor& values = values_[layer];
  const int64_t heads = keys.size(1), hd = keys.size(3);
  TORCH_CHECK(keys.device().is_cpu() && keys.is_contiguous() && values.is_contiguous(),
              "KvCache::write_rows: a contiguous CPU cache expected");
  TORCH_CHECK(sources.size() == slots.size() && slots.size() == positions.size(),
              "KvCache::write_rows: one source, slot and position per row");
  const int64_t width = heads * hd;
  const at::Tensor k_rows = k.reshape({-1, width}).contiguous();
  const at::Tensor v_rows = v.reshape({-1, width}).contiguous();
  TORCH_CHECK(k_rows.scalar_type() == keys.scalar_type() &&
                  v_rows.scalar_type() == keys.scalar_type() && k_rows.device().is_cpu() &&
                  v_rows.device().is_cpu() && k_rows.size(0) == v_rows.size(0) &&
                  k.size(-1) == hd && v.size(-1) == hd,
              "KvCache::write_rows: k and v of the cache's dtype, [N, ", heads, ", ", hd,
              "] on the CPU expected, got ", k.sizes(), " and ", v.sizes());
  const int64_t rows = k_rows.size(0);
  const size_t row_bytes = static_cast<size_t>(hd) * keys.element_size();
  const auto* k_src = static_cast<const char*>(k_rows.data_ptr());
  const auto* v_src = static_cast<const char*>(v_rows.data_ptr());
  auto* k_dst = static_cast<char*>(keys.data_ptr());
  auto* v_dst = static_cast<char*>(values.data_ptr());
  for (size_t i = 0; i < sources.size(); ++i) {  // all checked before any is written
    TORCH_CHECK(sources[i] >= 0 && sources[i] < rows && slots[i] >= 0 && slots[i] < slots_ &&
                    positions[i] >= 0 && positions[i] < max_len_,
                "KvCache::write_rows: row ", i, " (source ", sources[i], ", slot ", slots[i],
                ", position ", positions[i], ") outside the cache or the input");
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t from = static_cast<size_t>(sources[i] * heads + h) * row_bytes;
      const size_t to =
          static_cast<size_t>((slots[i] * heads + h) * max_len_ + positions[i]) * row_bytes;
      std::memcpy(k_dst + to, k_src + from, row_bytes);
      std::memcpy(v_dst + to, v_src + from, row_bytes);
    }
  }
}

}  // namespace flywheel::model
