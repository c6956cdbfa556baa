// Packing sequences into micro-batches by a token budget (trainer.micro_batch_tokens): several
// sequences per row, each with positions restarting at 0 and attention restricted to itself
// (segment ids), first-fit by decreasing length, deterministic.
//
// A sequence of prompt P and response R tokens takes P + R - 1 input positions: position
// P - 1 + j predicts response token j. unpack() turns per-position outputs of a micro-batch
// ([1, T]) into per-response-token matrices [sequences, max_response] in the order of
// MicroBatch::sequences, the layout the losses and estimators work in.
//
// Shared prefixes (PackOptions::shared_prefix): sequences with the same prompt (a GRPO group,
// a DPO pair) are packed as one tree: the prompt's first P - 1 tokens once (one segment), then
// per sequence a branch of its own, the prompt's last token and the response's first R - 1
// tokens at positions P - 1 ..., whose tokens read the shared tokens and their own branch
// (PackedBatch::prefix_ids). A group of n sequences takes P - 1 + sum R positions instead of
// n (P - 1) + sum R, and the prompt's forward and backward run once; the gradient through it
// sums every branch's. Results equal the unshared packing's up to rounding. A group that does
// not fit one micro-batch is split into trees that do.
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
  int64_t unshared_tokens = 0;     // T without shared prefixes (sum of P + R - 1)
};

struct PackOptions {
  int64_t max_tokens = 8192;  // positions per micro-batch (trainer.micro_batch_tokens)
  int64_t max_response = 1;   // >= every response length: the width of index / valid
  // Sequences with equal prompts (of >= 2 tokens) share them (see above); sequences with
  // mixture-of-experts routes never do (their routes are per sequence).
  bool shared_prefix = false;
};

// InvalidArgument naming the sequence when one does not fit in `max_tokens` (never truncated)
// or has an empty prompt or response.
absl::StatusOr<std::vector<MicroBatch>> pack_micro_batches(
    const std::vector<SequenceTokens>& sequences, const PackOptions& options);

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
                                                   const PackOptions& options,
                                                   comm::Communicator& comm);

// Per-position values of a micro-batch's row ([1, T] or [T]) as [S, max_response], zero where
// !valid. Differentiable.
at::Tensor unpack(const MicroBatch& micro_batch, const at::Tensor& per_position);

}  // namespace flywheel::trainer
