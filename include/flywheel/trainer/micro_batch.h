// Packing sequences into micro-batches by a token budget (trainer.micro_batch_tokens): several
// sequences per row, each with positions restarting at 0 and attention restricted to itself
// (segment ids), first-fit by decreasing length, deterministic.
//
// A sequence of prompt P and response R tokens takes P + R - 1 input positions: position
// P - 1 + j predicts response token j. unpack() turns per-position outputs of a micro-batch
// ([1, T]) into per-response-token matrices [sequences, max_response] in the order of
// MicroBatch::sequences, the layout the losses and estimators work in.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::trainer {

struct SequenceTokens {
  const std::vector<int32_t>* prompt = nullptr;    // >= 1 token
  const std::vector<int32_t>* response = nullptr;  // >= 1 token
};

struct MicroBatch {
  PackedBatch batch;               // one row [1, T]
  std::vector<int64_t> sequences;  // indices into the packed list, in row order
  at::Tensor index;                // [S, max_response] int64: row position of each response token
  at::Tensor valid;                // [S, max_response] bool: j < that sequence's response length
  int64_t tokens = 0;              // T
};

// InvalidArgument naming the sequence when one does not fit in `max_tokens` (never truncated)
// or has an empty prompt or response. `max_response` (>= every response length) sets the
// width of index / valid.
absl::StatusOr<std::vector<MicroBatch>> pack_micro_batches(
    const std::vector<SequenceTokens>& sequences, int64_t max_tokens, int64_t max_response);

// A micro-batch of no sequence (one padding token), run by a rank with fewer micro-batches than
// the others so that every rank makes the same collective calls.
MicroBatch empty_micro_batch(int64_t max_response);

// Per-position values of a micro-batch's row ([1, T] or [T]) as [S, max_response], zero where
// !valid. Differentiable.
at::Tensor unpack(const MicroBatch& micro_batch, const at::Tensor& per_position);

}  // namespace flywheel::trainer
