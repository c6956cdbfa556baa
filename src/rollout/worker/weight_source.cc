#include "flywheel/rollout/worker/weight_source.h"

#include <map>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/crc32c.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/safetensors.h"

namespace flywheel::rollout {

absl::StatusOr<bool> GrpcWeightSource::fetch_into(int64_t newer_than, double timeout_s,
                                                  core::PublishedWeights* into) {
  return client_->fetch_weights_into(newer_than, timeout_s, into);
}

absl::StatusOr<bool> ChannelWeightSource::fetch_into(int64_t newer_than, double timeout_s,
                                                     core::PublishedWeights* into) {
  absl::StatusOr<comm::WeightChannel::Received> received = channel_->receive(into);
  if (received.ok()) {
    if (*received != comm::WeightChannel::Received::kWeights) return false;
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

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> payload_tensors(
    const core::PublishedWeights& weights) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const core::WeightTensor& entry : weights.tensors) {
    FLYWHEEL_ASSIGN_OR_RETURN(at::ScalarType dtype, model::safetensors_dtype(entry.dtype));
    int64_t numel = 1;
    for (int64_t d : entry.shape) numel *= d;
    if (entry.offset + entry.size > weights.payload.size() ||
        static_cast<uint64_t>(numel) * at::elementSize(dtype) != entry.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights v", weights.version, ": tensor '", entry.name,
                       "' does not match its byte range in the payload"));
    }
    // from_blob does not take ownership; the engine copies what it stages.
    void* data = const_cast<char*>(weights.payload.data() + entry.offset);
    out.emplace_back(entry.name, at::from_blob(data, entry.shape, at::TensorOptions(dtype)));
  }
  return out;
}

absl::StatusOr<uint32_t> parameters_crc32c(const model::DecoderModel& model,
                                           const std::vector<core::WeightTensor>& manifest) {
  std::map<std::string, at::Tensor> params;
  for (const auto& [name, p] : model.named_parameters()) params[name] = p;
  uint32_t crc = 0;
  for (const core::WeightTensor& entry : manifest) {
    auto it = params.find(entry.name);
    if (it == params.end()) {
      return absl::NotFoundError(absl::StrCat("the model has no parameter '", entry.name, "'"));
    }
    FLYWHEEL_ASSIGN_OR_RETURN(at::ScalarType dtype, model::safetensors_dtype(entry.dtype));
    at::Tensor host = it->second.detach().to(at::kCPU, dtype).contiguous();
    crc = core::crc32c_extend(crc, host.data_ptr(), host.numel() * host.element_size());
  }
  return crc;
}

}  // namespace flywheel::rollout
