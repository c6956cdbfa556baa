// Delta encoding of weight versions (weight_sync.delta, docs/controller.md "Weights"): the bytes
// of a version XOR those of the version before it, each tensor's bytes regrouped by their
// position in an element (the sign and exponent bytes of every element together, then the next
// byte, ...) and compressed with zstd. Small updates leave the high bytes equal, so their XOR
// is runs of zeros that compress to almost nothing; the result is exact, bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/core/published_weights.h"

namespace flywheel::buffer {

// True when two manifests describe the same payload layout: the same tensors (names, dtypes,
// shapes, offsets, sizes) in the same order. Only then can one version be a delta of the other.
bool same_layout(const std::vector<core::WeightTensor>& a,
                 const std::vector<core::WeightTensor>& b);

// Working memory of the encoder and decoder, kept between versions: memory a process gets afresh
// costs a page fault per 4 KiB (0.3-0.4 s per 100 MB on some VMs), more than the encoding.
struct DeltaBuffers {
  std::string planes;      // the XOR, byte planes apart
  std::string compressed;  // zstd's output, before it is copied out at its size
};

struct DeltaCodecOptions {
  int level = 1;    // zstd level, 1-19 (WeightStore: 0 = no deltas)
  int threads = 1;  // threads of the XOR / byte-plane pass and of zstd's compression
};

// The delta that turns `base`'s payload into `next`'s (same layout and payload size, else
// InvalidArgument). With more threads the compressed bytes may differ; they decode the same.
absl::StatusOr<std::string> encode_weight_delta(const core::PublishedWeights& base,
                                                const core::PublishedWeights& next,
                                                const DeltaCodecOptions& options,
                                                DeltaBuffers* buffers);

// Applies `delta` to `payload` (the base version's bytes, laid out by `tensors`) in place.
// DataLoss when the delta does not decompress to exactly the payload's size (corrupt, or made
// for another layout): `payload` is then unchanged. A delta applied to the wrong base decodes
// without error; the caller checks the result's checksum.
absl::Status apply_weight_delta(std::string_view delta,
                                const std::vector<core::WeightTensor>& tensors,
                                std::string* payload, DeltaBuffers* buffers);

}  // namespace flywheel::buffer
