// The trainer's weight publisher (DESIGN.md §3, "Weights on the wire"): after a step, the
// policy's full weights are gathered from the learners' shards, bucket by bucket, in the
// rollout dtype; learner rank 0 then publishes them to the controller's WeightStore (served to
// workers over gRPC), broadcasts them over the weight channel when the job has one
// (weight_sync.transport mpi / nccl), and tells the controller that grants may now need them.
#pragma once

#include <cstdint>
#include <functional>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/buffer/weight_store.h"
#include "flywheel/comm/weight_channel.h"
#include "flywheel/core/published_weights.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::trainer {

// Gathers the full weights of `model` in `dtype`, bucket by bucket (collective); rank 0 gets
// them as one payload for `version`, the other ranks an empty one. A LoRA model publishes its
// adapters only (the rollout engines hold the frozen base). InvalidArgument for a dtype the wire
// has no name for (F32, BF16 and F16 only).
absl::StatusOr<core::PublishedWeights> gather_weights(ShardedDecoder& model, at::ScalarType dtype,
                                                      int64_t version, int64_t bucket_bytes);

struct WeightPublisherOptions {
  at::ScalarType dtype = at::kFloat;  // the rollout workers' (model.dtype)
  int64_t bucket_bytes = 64 << 20;    // weight_sync.bucket_bytes
};

// Where rank 0 publishes; every pointer may be null (then that step is skipped), and on the
// other ranks all are. Not owned.
struct WeightTargets {
  buffer::WeightStore* store = nullptr;
  comm::WeightChannel* channel = nullptr;  // after the store (it holds the same version)
  // After the store, before the channel: a worker that has the version must find the
  // controller accepting it, whichever way the version reached it.
  std::function<void(int64_t version)> published;
};

class WeightPublisher {
 public:
  WeightPublisher(const WeightPublisherOptions& options, ShardedDecoder* policy,
                  WeightTargets targets)
      : options_(options), policy_(policy), targets_(std::move(targets)) {}

  // The policy's weights as `version`. Collective over the policy's communicator; errors from
  // the gather or the store (a version not newer than the last). The first publication logs its
  // bytes beside the whole model's.
  absl::Status publish(int64_t version);

 private:
  WeightPublisherOptions options_;
  ShardedDecoder* policy_;
  WeightTargets targets_;
  bool described_ = false;
};

}  // namespace flywheel::trainer
