// Where a rollout worker's weights come from (weight_sync.transport): polled by the worker's
// fetcher thread, one round per call. Also what the worker does with a version it received:
// views of its tensors for the engine, and the checksum of what the engine then holds.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/buffer/service/controller_client.h"
#include "flywheel/comm/weight_channel.h"
#include "flywheel/core/published_weights.h"
#include "flywheel/model/decoder.h"

namespace flywheel::rollout {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // One round: true with a version newer than `newer_than` in `into` (its memory reused),
  // false when there is none yet; an error for a transfer that failed.
  virtual absl::StatusOr<bool> fetch_into(int64_t newer_than, double timeout_s,
                                          core::PublishedWeights* into) = 0;
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
                                  core::PublishedWeights* into) override;

 private:
  buffer::ControllerClient* client_;
};

// mpi / nccl: the versions learner rank 0 broadcasts over a WeightChannel. A version that arrives
// damaged (checksum or manifest) is fetched over gRPC from the controller instead, which holds
// the same version (it publishes there before broadcasting).
class ChannelWeightSource final : public WeightSource {
 public:
  ChannelWeightSource(comm::WeightChannel* channel, buffer::ControllerClient* client)
      : channel_(channel), client_(client) {}
  absl::StatusOr<bool> fetch_into(int64_t newer_than, double timeout_s,
                                  core::PublishedWeights* into) override;
  bool finished() const override { return channel_->closed(); }
  // Versions received intact over the channel, and damaged ones re-fetched over gRPC. Read them
  // once the fetching thread is done.
  int64_t received() const { return received_; }
  int64_t damaged() const { return damaged_; }

 private:
  comm::WeightChannel* channel_;
  buffer::ControllerClient* client_;
  int64_t received_ = 0, damaged_ = 0;
};

// Views of the payload's tensors (no copy: valid while `weights` lives). InvalidArgument for a
// manifest entry that does not fit the payload or has an unknown dtype.
absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> payload_tensors(
    const core::PublishedWeights& weights);

// CRC-32C of `model`'s parameters named in `manifest`, in its order, as bytes of their dtype:
// equal to the published payload's when the model holds exactly those weights.
absl::StatusOr<uint32_t> parameters_crc32c(const model::DecoderModel& model,
                                           const std::vector<core::WeightTensor>& manifest);

}  // namespace flywheel::rollout
