#include "flywheel/trainer/weight_publisher.h"

#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/model/safetensors.h"

namespace flywheel::trainer {

absl::StatusOr<core::PublishedWeights> gather_weights(ShardedDecoder& model, at::ScalarType dtype,
                                                      int64_t version, int64_t bucket_bytes) {
  absl::StatusOr<std::string> name = model::safetensors_dtype_name(dtype);
  if (!name.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights cannot be published as ", at::toString(dtype)));
  }
  core::PublishedWeights out;
  out.version = version;
  out.bucket_bytes = static_cast<uint64_t>(bucket_bytes);
  const bool keep = model.comm().rank() == 0;
  model.for_each_full_bucket(
      bucket_bytes, dtype,
      [&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
        if (!keep) return;
        for (const auto& [tensor_name, t] : bucket) {
          at::Tensor host = t.to(at::kCPU).contiguous();
          core::WeightTensor entry;
          entry.name = tensor_name;
          entry.dtype = *name;
          entry.shape = host.sizes().vec();
          entry.offset = out.payload.size();
          entry.size = static_cast<uint64_t>(host.numel() * host.element_size());
          out.payload.append(static_cast<const char*>(host.data_ptr()), entry.size);
          out.tensors.push_back(std::move(entry));
        }
      },
      /*adapters_only=*/model.has_adapters());
  return out;
}

absl::Status WeightPublisher::publish(int64_t version) {
  FLYWHEEL_ASSIGN_OR_RETURN(
      core::PublishedWeights weights,
      gather_weights(*policy_, options_.dtype, version, options_.bucket_bytes));
  if (!described_ && policy_->comm().rank() == 0) {
    described_ = true;
    const double model_bytes = static_cast<double>(policy_->config().num_parameters()) *
                               static_cast<double>(c10::elementSize(options_.dtype));
    const double bytes = static_cast<double>(weights.payload.size());
    FLYWHEEL_LOG_INFO(
        "weight publication: %.3f MiB per version (%s), the model is %.3f MiB: %.4f of it",
        bytes / (1 << 20), policy_->has_adapters() ? "LoRA adapters only" : "every weight",
        model_bytes / (1 << 20), bytes / model_bytes);
  }
  if (targets_.store != nullptr) {
    FLYWHEEL_RETURN_IF_ERROR(targets_.store->publish(std::move(weights)));
  }
  if (targets_.published) targets_.published(version);
  if (targets_.store != nullptr && targets_.channel != nullptr) {
    targets_.channel->send(*targets_.store->latest());
  }
  return absl::OkStatus();
}

}  // namespace flywheel::trainer
