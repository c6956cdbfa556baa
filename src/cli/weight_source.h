// Where a rollout worker's weights come from (weight_sync.transport): polled by the worker's
// fetcher thread, one round per call.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "flywheel/buffer/controller_client.h"
#include "flywheel/buffer/weight_store.h"
#include "flywheel/trainer/weight_channel.h"

namespace flywheel::cli {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // One round: true with a version newer than `newer_than` in `into` (its memory reused),
  // false when there is none yet; an error for a transfer that failed.
  virtual absl::StatusOr<bool> fetch_into(int64_t newer_than, double timeout_s,
                                          buffer::PublishedWeights* into) = 0;
  // False while the sender may still send versions this worker must take part in receiving (a
  // broadcast): the worker then keeps fetching after its own work is done. Called by the thread
  // that calls fetch_into.
  virtual bool finished() const { return true; }
};

// grpc: the controller's WeightStore, streamed bucket by bucket (ControllerClient).
class GrpcWeightSource final : public WeightSource {
 public:
  explicit GrpcWeightSource(buffer::ControllerClient* client) : client_(client) {}
  absl::StatusOr<bool> fetch_into(int64_t newer_than, double timeout_s,
                                  buffer::PublishedWeights* into) override;

 private:
  buffer::ControllerClient* client_;
};

// mpi / nccl: the versions learner rank 0 broadcasts over a WeightChannel. A version that arrives
// damaged (checksum or manifest) is fetched over gRPC from the controller instead, which holds
// the same version (it publishes there before broadcasting).
class ChannelWeightSource final : public WeightSource {
 public:
  ChannelWeightSource(trainer::WeightChannel* channel, buffer::ControllerClient* client)
      : channel_(channel), client_(client) {}
  absl::StatusOr<bool> fetch_into(int64_t newer_than, double timeout_s,
                                  buffer::PublishedWeights* into) override;
  bool finished() const override { return channel_->closed(); }
  // Versions received intact over the channel, and damaged ones re-fetched over gRPC. Read them
  // once the fetching thread is done.
  int64_t received() const { return received_; }
  int64_t damaged() const { return damaged_; }

 private:
  trainer::WeightChannel* channel_;
  buffer::ControllerClient* client_;
  int64_t received_ = 0, damaged_ = 0;
};

}  // namespace flywheel::cli
