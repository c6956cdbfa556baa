// Rows of token ids of different lengths through one cache-less forward: right-padded to the
// longest, and the hidden state read at one position of each row. Used where a head reads one
// token per sequence (a reward model's score, a judge's verdict token).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "flywheel/model/decoder.h"

namespace flywheel::model {

// The rows `include` names (indices into `rows`), longest first and cut into batches of at most
// `batch_size`: similar lengths then share a forward pass, so that little of it is padding. The
// order among rows of one length is kept.
std::vector<std::vector<size_t>> length_sorted_batches(
    const std::vector<std::vector<int64_t>>& rows, std::vector<size_t> include, int64_t batch_size);

// The final hidden states (after the last norm) of every row, right-padded to the longest:
// [B, T, hidden] in the model's dtype and on its device, without gradients. Rows are non-empty,
// ids < vocab_size. Attention is causal, so no real token attends to the padding after it and no
// mask is needed. Throws c10::Error / std::bad_alloc as the forward does.
at::Tensor hidden_states(const DecoderModel& model,
                         const std::vector<const std::vector<int64_t>*>& rows);

// The final hidden state of row b at position read[b] (0 <= read[b] < rows[b]->size()),
// [B, hidden], as hidden_states().
at::Tensor hidden_at(const DecoderModel& model,
                     const std::vector<const std::vector<int64_t>*>& rows,
                     const std::vector<int64_t>& read);

}  // namespace flywheel::model
