// The policy weights the controller holds for rollout workers (core::PublishedWeights, DESIGN.md
// §3 "Weights on the wire"), the newest versions and the workers' acknowledgements.
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
#include "flywheel/core/published_weights.h"

namespace flywheel::buffer {

// Holds the newest published versions of the policy's full weights for rollout workers.
// Thread-safe.
class WeightStore {
 public:
  explicit WeightStore(int keep_versions = 2);

  // Validates (core::validate_tensors(), bucket_bytes >= 1, version newer than the latest) ->
  // InvalidArgument naming the tensor; computes crc32c and bucket_crc32c; makes it the latest.
  // Older versions beyond keep_versions are dropped (streams already serving them keep them
  // alive until they end).
  absl::Status publish(core::PublishedWeights weights) ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<const core::PublishedWeights> latest() const
      ABSL_LOCKS_EXCLUDED(mu_);  // null: none
  // Null when `version` is not held.
  std::shared_ptr<const core::PublishedWeights> get(int64_t version) const ABSL_LOCKS_EXCLUDED(mu_);
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
  std::vector<std::shared_ptr<const core::PublishedWeights>> held_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, uint32_t> published_crcs_ ABSL_GUARDED_BY(mu_);  // the last 64 versions
  int64_t latest_version_ ABSL_GUARDED_BY(mu_) = -1;
  AckCounters counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> worker_versions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::buffer
