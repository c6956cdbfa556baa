// The policy weights as learners publish them and rollout workers receive them (DESIGN.md §3,
// "Weights on the wire"): a manifest (tensor names, dtypes, shapes, byte ranges, version,
// CRC-32C) over one payload of concatenated tensor bytes, streamed in buckets of a fixed size.
// Below every side of the wire: the buffer serves it, the trainer publishes it, comm broadcasts
// it and the worker applies it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace flywheel::core {

struct WeightTensor {
  std::string name;
  std::string dtype;  // "F32" | "BF16" | "F16"
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // byte offset in payload
  uint64_t size = 0;    // bytes
};

struct PublishedWeights {
  int64_t version = 0;
  std::vector<WeightTensor> tensors;
  std::string payload;               // the tensors' bytes, concatenated
  uint64_t bucket_bytes = 64 << 20;  // bytes per streamed bucket (>= 1)
  uint32_t crc32c = 0;               // of payload; filled in by buffer::WeightStore::publish
  // CRC-32C of each bucket_bytes piece of payload (the last may be shorter); filled in by
  // buffer::WeightStore::publish, so that serving a bucket costs no checksum pass.
  std::vector<uint32_t> bucket_crc32c;
};

// Bytes per element of a dtype ("F32" 4, "BF16" and "F16" 2); 0 for an unknown one.
int dtype_bytes(const std::string& dtype);

// Checks a manifest against a payload of `payload_bytes`: non-empty unique names, known dtypes,
// size == product(shape) * dtype size, ranges in bounds, ascending and non-overlapping.
// InvalidArgument naming the tensor.
absl::Status validate_tensors(const std::vector<WeightTensor>& tensors, uint64_t payload_bytes);

}  // namespace flywheel::core
