// Rotary position embeddings (RoPE): the inverse frequencies of a config and the cos / sin
// tables of a batch's positions, shared by the decoder's training and cached paths.
#pragma once

#include <utility>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "flywheel/model/model_config.h"

namespace flywheel::model {

// Inverse RoPE frequencies [head_dim / 2] in float32, with Llama 3 scaling when configured.
at::Tensor rope_inverse_frequencies(const ModelConfig& config);

// cos and sin tables [..., 1, head_dim] of `positions` [...] (int64) for `inv_freq` [head_dim / 2],
// in `dtype`: angle position * inv_freq[i] for dimensions i and i + head_dim / 2, in float32 as
// transformers computes it. On the CPU each position's values come from one scalar loop, so a
// position gets the same table whatever the batch's shape (LibTorch's vectorised cos takes
// another path for a tensor's last elements): the engine and the learner give it the same bits.
std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions,
                                              const at::Tensor& inv_freq, at::ScalarType dtype);

}  // namespace flywheel::model
