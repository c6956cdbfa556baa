#include "flywheel/buffer/weight_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flywheel/core/crc32c.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::buffer {

namespace {

// Fills in `w`'s crc32c and bucket_crc32c: one pass over the buckets, the payload's from theirs.
void fill_checksums(core::PublishedWeights* w) {
  const std::string& payload = w->payload;
  w->bucket_crc32c.clear();
  w->bucket_crc32c.reserve(payload.size() / w->bucket_bytes + 1);
  uint32_t crc = 0;
  for (uint64_t at = 0; at < payload.size(); at += w->bucket_bytes) {
    const uint64_t n = std::min<uint64_t>(w->bucket_bytes, payload.size() - at);
    const uint32_t bucket = core::crc32c_extend(0, payload.data() + at, n);
    w->bucket_crc32c.push_back(bucket);
    crc = core::crc32c_combine(crc, bucket, n);
  }
  w->crc32c = crc;
}

}  // namespace

WeightStore::WeightStore(int keep_versions, DeltaCodecOptions deltas)
    : keep_versions_(static_cast<size_t>(std::max(keep_versions, 1))), deltas_(deltas) {}

absl::Status WeightStore::publish(core::PublishedWeights weights) {
  if (weights.bucket_bytes < 1) return absl::InvalidArgumentError("bucket_bytes must be >= 1");
  FLYWHEEL_RETURN_IF_ERROR(core::validate_tensors(weights.tensors, weights.payload.size()));
  {
    absl::MutexLock lock(&mu_);
    if (weights.version <= latest_version_) {
      return absl::InvalidArgumentError(absl::StrCat("version ", weights.version,
                                                     " is not newer than the latest published (",
                                                     latest_version_, ")"));
    }
  }
  fill_checksums(&weights);  // outside the lock (~50 ms for 400 MB)
  auto shared = std::make_shared<const core::PublishedWeights>(std::move(weights));
  std::shared_ptr<const core::PublishedWeights> dropped;  // freed outside the lock
  absl::MutexLock lock(&mu_);
  if (shared->version <= latest_version_) {  // a concurrent publish won
    return absl::InvalidArgumentError(absl::StrCat("version ", shared->version,
                                                   " is not newer than the latest published (",
                                                   latest_version_, ")"));
  }
  latest_version_ = shared->version;
  published_crcs_[shared->version] = shared->crc32c;
  while (published_crcs_.size() > kRememberedVersions)
    published_crcs_.erase(published_crcs_.begin());
  held_.push_back(std::move(shared));
  if (held_.size() > keep_versions_) {
    dropped = std::move(held_.front());
    held_.erase(held_.begin());
  }
  return absl::OkStatus();
}

std::shared_ptr<const core::PublishedWeights> WeightStore::latest() const {
  absl::MutexLock lock(&mu_);
  return held_.empty() ? nullptr : held_.back();
}

std::shared_ptr<const core::PublishedWeights> WeightStore::get(int64_t version) const {
  absl::MutexLock lock(&mu_);
  return held(version);
}

std::shared_ptr<const core::PublishedWeights> WeightStore::held(int64_t version) const {
  for (const auto& w : held_) {
    if (w->version == version) return w;
  }
  return nullptr;
}

std::shared_ptr<const core::PublishedWeights> WeightStore::cached_delta(
    int64_t version, int64_t base_version, uint32_t base_crc32c) const {
  return delta_.version == version && delta_.base_version == base_version &&
                 delta_.base_crc32c == base_crc32c
             ? delta_.bytes
             : nullptr;
}

std::shared_ptr<const core::PublishedWeights> WeightStore::delta(int64_t version,
                                                                 int64_t base_version,
                                                                 uint32_t base_crc32c) {
  if (deltas_.level <= 0 || base_version == version) return nullptr;
  {
    // Served from the cache without waiting for an encoding in progress (StreamWeights asks
    // again for every stream and re-requested bucket).
    absl::MutexLock lock(&mu_);
    if (auto cached = cached_delta(version, base_version, base_crc32c)) return cached;
  }
  absl::MutexLock encoding(&encode_mu_);  // an asker arriving mid-encoding waits and reuses it
  std::shared_ptr<const core::PublishedWeights> next, base;
  {
    absl::MutexLock lock(&mu_);
    if (auto cached = cached_delta(version, base_version, base_crc32c)) return cached;
    next = held(version);
    base = held(base_version);
    if (next == nullptr || base == nullptr || base->crc32c != base_crc32c) return nullptr;
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> bytes = encode_weight_delta(*base, *next, deltas_, &delta_buffers_);
  if (!bytes.ok()) return nullptr;  // another layout: the asker fetches the version whole
  auto d = std::make_shared<core::PublishedWeights>();
  d->version = version;
  d->bucket_bytes = next->bucket_bytes;
  d->payload = std::move(*bytes);
  fill_checksums(d.get());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  absl::MutexLock lock(&mu_);
  delta_ = {version, base_version, base_crc32c, d};
  ++delta_counters_.encoded;
  delta_counters_.encode_s += seconds;
  delta_counters_.bytes += d->payload.size();
  delta_counters_.full_bytes += next->payload.size();
  return d;
}

WeightStore::DeltaCounters WeightStore::delta_counters() const {
  absl::MutexLock lock(&mu_);
  return delta_counters_;
}

int64_t WeightStore::latest_version() const {
  absl::MutexLock lock(&mu_);
  return latest_version_;
}

absl::Status WeightStore::acknowledge(const std::string& worker, int64_t version, uint32_t crc32c) {
  absl::MutexLock lock(&mu_);
  auto it = published_crcs_.find(version);
  if (it == published_crcs_.end()) {
    ++counters_.rejected;
    return absl::FailedPreconditionError(
        version > latest_version_
            ? absl::StrCat("version ", version, " was not published (the latest is ",
                           latest_version_, ")")
            : absl::StrCat("version ", version, " was never published or is too old to check"));
  }
  if (it->second != crc32c) {
    ++counters_.mismatches;
    return absl::DataLossError(absl::StrCat("version ", version, ": crc32c ", crc32c,
                                            " differs from the published ", it->second));
  }
  ++counters_.acks;
  worker_versions_[worker] = version;
  return absl::OkStatus();
}

WeightStore::AckCounters WeightStore::ack_counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

std::map<std::string, int64_t> WeightStore::worker_versions() const {
  absl::MutexLock lock(&mu_);
  return worker_versions_;
}

}  // namespace flywheel::buffer
