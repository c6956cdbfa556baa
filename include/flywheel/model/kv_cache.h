// Preallocated key/value cache for the decoder, organised in sequence slots.
//
// Layout per layer: keys and values of shape [slots, kv_heads, max_len, head_dim], allocated
// once. With this layout the rows of a batch whose slots are consecutive read their keys as one
// strided view that batched matmuls take without copying.
// A slot holds one sequence; position p of a slot holds the key/value of that sequence's token
// at position p. The rollout engine assigns slots to sequences (continuous batching); nothing
// here is reallocated per step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/model/model_config.h"

namespace flywheel::model {

class KvCache {
 public:
  // InvalidArgument for non-positive sizes.
  static absl::StatusOr<std::unique_ptr<KvCache>> create(const ModelConfig& config, int64_t slots,
                                                         int64_t max_len,
                                                         const at::TensorOptions& options);

  int64_t slots() const { return slots_; }
  int64_t max_len() const { return max_len_; }
  int64_t num_layers() const { return static_cast<int64_t>(keys_.size()); }
  at::Tensor& keys(int64_t layer) { return keys_[layer]; }
  at::Tensor& values(int64_t layer) { return values_[layer]; }

  // Copies positions [0, length) of slot `from` into slot `to` in every layer (n samples of one
  // prompt share its prefill).
  void copy_prefix(int64_t from, int64_t to, int64_t length);
  // Zeroes positions [begin, end) of `slot` in every layer. Attention gives the positions a row
  // may not read probability 0, but 0 x NaN is NaN: a slot reused by a new sequence must not keep
  // non-finite values from an earlier one where a longer row of the batch makes it read them.
  void clear(int64_t slot, int64_t begin, int64_t end);
  // Row sources[i] of `k` and of `v` (CPU tensors [N, kv_heads, head_dim] of the cache's dtype)
  // to position positions[i] of slot slots[i] in layer `layer`: what index_put_ does, as plain
  // copies (a decode step writes one row per sequence, and LibTorch's indexing costs more than
  // the copy). The cache must be contiguous on the CPU; slots and positions must be in range.
  void write_rows(int64_t layer, const at::Tensor& k, const at::Tensor& v,
                  const std::vector<int64_t>& sources, const std::vector<int64_t>& slots,
                  const std::vector<int64_t>& positions);

 private:
  KvCache(int64_t slots, int64_t max_len) : slots_(slots), max_len_(max_len) {}

  int64_t slots_;
  int64_t max_len_;
  std::vector<at::Tensor> keys_;
  std::vector<at::Tensor> values_;
};

}  // namespace flywheel::model
