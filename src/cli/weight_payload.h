// The policy's full weights as a published payload (buffer::PublishedWeights: a manifest of
// names, dtypes, shapes and byte ranges over one contiguous payload) and back.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "flywheel/buffer/weight_store.h"
#include "flywheel/model/decoder.h"
#include "flywheel/trainer/sharded_decoder.h"

namespace flywheel::cli {

// "F32" | "BF16" | "F16"; InvalidArgument for other dtypes.
absl::StatusOr<std::string> wire_dtype(at::ScalarType dtype);
absl::StatusOr<at::ScalarType> parse_wire_dtype(const std::string& name);

// Gathers the full weights of `model` in `dtype`, bucket by bucket (collective); rank 0 gets
// them as one payload for `version`, the other ranks an empty one.
absl::StatusOr<buffer::PublishedWeights> gather_payload(trainer::ShardedDecoder& model,
                                                        at::ScalarType dtype, int64_t version,
                                                        int64_t bucket_bytes);

// Views of the payload's tensors (no copy: valid while `weights` lives). InvalidArgument for a
// manifest entry that does not fit the payload or has an unknown dtype.
absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> payload_tensors(
    const buffer::PublishedWeights& weights);

// CRC-32C of `model`'s parameters named in `manifest`, in its order, as bytes of their dtype:
// equal to the published payload's when the model holds exactly those weights.
absl::StatusOr<uint32_t> parameters_crc32c(const model::DecoderModel& model,
                                           const std::vector<buffer::WeightTensor>& manifest);

}  // namespace flywheel::cli
