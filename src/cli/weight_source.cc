#include "weight_source.h"

#include "flywheel/core/logging.h"

namespace flywheel::cli {

absl::StatusOr<bool> GrpcWeightSource::fetch_into(int64_t newer_than, double timeout_s,
                                                  buffer::PublishedWeights* into) {
  return client_->fetch_weights_into(newer_than, timeout_s, into);
}

absl::StatusOr<bool> ChannelWeightSource::fetch_into(int64_t newer_than, double timeout_s,
                                                     buffer::PublishedWeights* into) {
  absl::StatusOr<trainer::WeightChannel::Received> received = channel_->receive(into);
  if (received.ok()) {
    if (*received != trainer::WeightChannel::Received::kWeights) return false;
    ++received_;
    return into->version > newer_than;
  }
  if (received.status().code() != absl::StatusCode::kDataLoss &&
      received.status().code() != absl::StatusCode::kInvalidArgument) {
    return received.status();
  }
  ++damaged_;
  FLYWHEEL_LOG_WARN("%s; fetching it from the controller over gRPC", received.status().message());
  return client_->fetch_weights_into(newer_than, timeout_s, into);
}

}  // namespace flywheel::cli
