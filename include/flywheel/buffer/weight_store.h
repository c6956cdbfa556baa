// The policy weights the controller publishes to rollout workers (DESIGN.md §3, "Weights on the
// wire"): a manifest (tensor names, dtypes, shapes, byte ranges, version, CRC-32C) over one
// payload of concatenated tensor bytes, streamed in buckets of a fixed size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace flywheel::buffer {

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
  uint32_t crc32c = 0;               // of payload; filled in by WeightStore::publish
  // CRC-32C of each bucket_bytes piece of payload (the last may be shorter); filled in by
  // WeightStore::publish, so that serving a bucket costs no checksum pass.
  std::vector<uint32_t> bucket_crc32c;
};

// CRC-32C (Castagnoli) of `size` bytes continuing from `crc`, the CRC-32C of the bytes before
// them (0 for none): crc32c_extend(crc32c_extend(0, A), B) == crc32c_extend(0, A + B), and
// crc32c_extend(0, data, size) == flywheel::core::crc32c(data, size). Uses the CPU's crc32
// instruction where it has one (~10x the table's speed).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);

// The CRC-32C of A + B from crc32c(A), crc32c(B) and B's size, in O(log size_b).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b);

// Bytes per element of a dtype ("F32" 4, "BF16" and "F16" 2); 0 for an unknown one.
int dtype_bytes(const std::string& dtype);

// Checks a manifest against a payload of `payload_bytes`: non-empty unique names, known dtypes,
// size == product(shape) * dtype size, ranges in bounds, ascending and non-overlapping.
// InvalidArgument naming the tensor.
absl::Status validate_tensors(const std::vector<WeightTensor>& tensors, uint64_t payload_bytes);

// Holds the newest published versions of the policy's full weights for rollout workers.
// Thread-safe.
class WeightStore {
 public:
  explicit WeightStore(int keep_versions = 2);

  // Validates (validate_tensors(), bucket_bytes >= 1, version newer than the latest) ->
  // InvalidArgument naming the tensor; computes crc32c and bucket_crc32c; makes it the latest.
  // Older versions beyond keep_versions are dropped (streams already serving them keep them
  // alive until they end).
  absl::Status publish(PublishedWeights weights) ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<const PublishedWeights> latest() const ABSL_LOCKS_EXCLUDED(mu_);  // null: none
  // Null when `version` is not held.
  std::shared_ptr<const PublishedWeights> get(int64_t version) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t latest_version() const ABSL_LOCKS_EXCLUDED(mu_);  // -1 when none published

  // A worker's acknowledgement that it applied `version` and that its weights hash to `crc32c`.
  // FailedPrecondition (and nothing recorded) when `version` was never published (or is newer
  // than the latest, or older than the last kRememberedVersions published); DataLoss when the
  // crc differs from the published one (recorded as a mismatch, counted). Versions dropped from
  // the store can still be acknowledged.
  absl::Status acknowledge(const std::string& worker, int64_t version, uint32_t crc32c)
      ABSL_LOCKS_EXCLUDED(mu_);
  struct AckCounters {
    int64_t acks = 0, mismatches = 0, rejected = 0;
  };
  AckCounters ack_counters() const ABSL_LOCKS_EXCLUDED(mu_);
  // Last acknowledged (with the right crc) version per worker.
  std::map<std::string, int64_t> worker_versions() const ABSL_LOCKS_EXCLUDED(mu_);

  // Published versions whose crc32c is remembered for acknowledge().
  static constexpr size_t kRememberedVersions = 64;

 private:
  const size_t keep_versions_;
  mutable absl::Mutex mu_;
  // Held versions, oldest first.
  std::vector<std::shared_ptr<const PublishedWeights>> held_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, uint32_t> published_crcs_ ABSL_GUARDED_BY(mu_);  // the last 64 versions
  int64_t latest_version_ ABSL_GUARDED_BY(mu_) = -1;
  AckCounters counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> worker_versions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::buffer
