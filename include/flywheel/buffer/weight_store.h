// The policy weights the controller holds for rollout workers (core::PublishedWeights, DESIGN.md
// §3 "Weights on the wire"), the newest versions and the workers' acknowledgements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/buffer/weight_delta.h"
#include "flywheel/core/published_weights.h"

namespace flywheel::buffer {

// Holds the newest published versions of the policy's full weights for rollout workers, and
// the delta from the version before to the newest (weight_delta.h). Thread-safe.
class WeightStore {
 public:
  // deltas: how deltas are encoded (weight_sync.delta_level, delta_threads); level 0: none.
  explicit WeightStore(int keep_versions = 2, DeltaCodecOptions deltas = {0, 1});
  ~WeightStore();
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

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

  // The delta from `base_version` to `version` (weight_delta.h) as a PublishedWeights holding
  // the compressed bytes as its payload (with their crc32c and bucket checksums, `version`'s
  // bucket size, no tensors). Null when deltas are off, the base's crc32c is not `base_crc32c`
  // (the asker holds other bytes), the layouts differ, or the delta is not kept and either
  // version is no longer held. The last kKeptDeltas deltas encoded are kept for the next askers.
  //
  // Deltas are encoded on the store's own encoder thread, never on the asker's: delta_async()
  // calls `done` with the result on that thread once it is encoded (askers of the same delta
  // meanwhile join the same encoding), or at once on the caller's thread when the delta is kept
  // or cannot be made. Once any worker has asked for a delta, every later publish() also starts
  // encoding the delta from the version before, so that it is ready when the workers ask.
  // delta() waits for delta_async()'s answer. A store destroyed with deltas still queued answers
  // their askers with null (they fetch the version whole).
  static constexpr size_t kKeptDeltas = 2;
  using DeltaCallback = std::function<void(std::shared_ptr<const core::PublishedWeights>)>;
  void delta_async(int64_t version, int64_t base_version, uint32_t base_crc32c, DeltaCallback done)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<const core::PublishedWeights> delta(int64_t version, int64_t base_version,
                                                      uint32_t base_crc32c)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The delta if it is kept, else null: never waits (StreamWeights, whose askers start over from
  // the manifest when it is gone).
  std::shared_ptr<const core::PublishedWeights> kept_delta(int64_t version, int64_t base_version,
                                                           uint32_t base_crc32c) const
      ABSL_LOCKS_EXCLUDED(mu_);
  struct DeltaCounters {
    int64_t encoded = 0;      // deltas encoded
    double encode_s = 0;      // seconds spent encoding them
    uint64_t bytes = 0;       // their compressed bytes
    uint64_t full_bytes = 0;  // the bytes of the versions they encode
  };
  DeltaCounters delta_counters() const ABSL_LOCKS_EXCLUDED(mu_);

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
  std::shared_ptr<const core::PublishedWeights> held(int64_t version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<const core::PublishedWeights> cached_delta(int64_t version, int64_t base_version,
                                                             uint32_t base_crc32c) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A delta to encode: both versions (kept alive until it is done) and who waits for it.
  struct DeltaJob {
    std::shared_ptr<const core::PublishedWeights> next, base;
    std::vector<DeltaCallback> waiting;
  };
  // Queues the delta from `base` to `next` (a job of the same pair already queued or encoding
  // takes `done` instead); starts the encoder thread on first use.
  void queue_delta(std::shared_ptr<const core::PublishedWeights> next,
                   std::shared_ptr<const core::PublishedWeights> base, DeltaCallback done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void encode_deltas() ABSL_LOCKS_EXCLUDED(mu_);  // the encoder thread
  // The delta from `base` to `next`, encoded (null: another layout), kept and counted.
  std::shared_ptr<const core::PublishedWeights> encode(const core::PublishedWeights& next,
                                                       const core::PublishedWeights& base)
      ABSL_LOCKS_EXCLUDED(mu_);

  const size_t keep_versions_;
  const DeltaCodecOptions deltas_;
  DeltaBuffers delta_buffers_;  // the encoder thread's only
  mutable absl::Mutex mu_;
  std::deque<DeltaJob> delta_jobs_ ABSL_GUARDED_BY(mu_);  // front: the one encoding, if any
  bool encoding_ ABSL_GUARDED_BY(mu_) = false;            // delta_jobs_.front() is encoding
  bool deltas_asked_ ABSL_GUARDED_BY(mu_) = false;        // publish() encodes ahead from now on
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar jobs_changed_;  // a job queued, or stopping_
  std::thread encoder_;         // started by the first queued delta
  // Held versions, oldest first.
  std::vector<std::shared_ptr<const core::PublishedWeights>> held_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, uint32_t> published_crcs_ ABSL_GUARDED_BY(mu_);  // the last 64 versions
  int64_t latest_version_ ABSL_GUARDED_BY(mu_) = -1;
  AckCounters counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> worker_versions_ ABSL_GUARDED_BY(mu_);
  struct CachedDelta {
    int64_t version = -1, base_version = -1;
    uint32_t base_crc32c = 0;
    std::shared_ptr<const core::PublishedWeights> bytes;
  };
  std::deque<CachedDelta> kept_deltas_ ABSL_GUARDED_BY(mu_);  // oldest first
  DeltaCounters delta_counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::buffer
