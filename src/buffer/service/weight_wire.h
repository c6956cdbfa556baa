// What the weight RPCs' server and client agree on beyond the proto (docs/controller.md,
// "Weights").
#pragma once

#include <cstdint>

namespace flywheel::buffer {

// GetWeightsManifest's UNAVAILABLE message before the first publication; the client tells it
// from an unreachable server by this text (and then answers "nothing newer", not an error).
constexpr char kNoWeightsYet[] = "no weights published yet";

// Room a WeightsBucket message needs beyond its data (field tags, varints): buckets are at most
// max_message_bytes - kBucketHeadroomBytes.
constexpr uint64_t kBucketHeadroomBytes = 1024;

// The largest bucket that fits in a message of `max_message_bytes` (at least 1 byte).
inline uint64_t max_bucket_for(int64_t max_message_bytes) {
  return max_message_bytes > static_cast<int64_t>(kBucketHeadroomBytes) + 1
             ? static_cast<uint64_t>(max_message_bytes) - kBucketHeadroomBytes
             : 1;
}

}  // namespace flywheel::buffer
