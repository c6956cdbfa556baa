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
#include "flywheel/buffer/trajectory.h"
#include "flywheel/comm/communicator.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::trainer {

struct SequenceTokens {
  const std::vector<int32_t>* prompt = nullptr;    // >= 1 token
  const std::vector<int32_t>* response = nullptr;  // >= 1 token
  // Mixture of experts, optional: the trajectory whose routes (buffer::Trajectory::routes, of
  // prompt + response) go to PackedBatch::routes.
  const buffer::Trajectory* routes = nullptr;
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

// Micro-batches of `sequences` for one collective pass: as many on every rank of `comm` (a rank
// with fewer runs empty_micro_batch()es), so that every rank makes the same forward/backward
// calls. Sequences with an empty response are left out (nothing to train). `ids[i]` names
// sequence i; rows_of() maps a micro-batch's sequences back to them. Collective; every rank
// returns an error when any rank's sequences do not pack.
struct BalancedMicroBatches {
  std::vector<MicroBatch> micro_batches;
  std::vector<int64_t> ids;  // packed list index -> the caller's id
  at::Tensor rows_of(const MicroBatch& mb) const;
};
absl::StatusOr<BalancedMicroBatches> pack_balanced(const std::vector<SequenceTokens>& sequences,
                                                   const std::vector<int64_t>& ids,
                                                   int64_t max_tokens, int64_t max_response,
                                                   comm::Communicator& comm);

// Per-position values of a micro-batch's row ([1, T] or [T]) as [S, max_response], zero where
// !valid. Differentiable.
at::Tensor unpack(const MicroBatch& micro_batch, const at::Tensor& per_position);

}  // namespace flywheel::trainer
