#include "flywheel/buffer/weight_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
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

WeightStore::~WeightStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    jobs_changed_.Signal();
  }
  if (encoder_.joinable()) encoder_.join();
  std::deque<DeltaJob> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(delta_jobs_);
  }
  for (DeltaJob& job : left) {
    for (DeltaCallback& done : job.waiting) done(nullptr);
  }
}

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
  std::vector<DeltaJob> superseded;                       // likewise
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
  if (deltas_.level > 0 && deltas_asked_ && held_.size() >= 2) {
    // Encode ahead the delta the workers holding the version before will ask for. Deltas queued
    // ahead for older versions that nobody waits for are not encoded any more.
    for (auto it = delta_jobs_.begin() + (encoding_ ? 1 : 0); it != delta_jobs_.end();) {
      if (!it->waiting.empty()) {
        ++it;
        continue;
      }
      superseded.push_back(std::move(*it));
      it = delta_jobs_.erase(it);
    }
    queue_delta(held_.back(), held_[held_.size() - 2], nullptr);
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
  for (const CachedDelta& d : kept_deltas_) {
    if (d.version == version && d.base_version == base_version && d.base_crc32c == base_crc32c) {
      return d.bytes;
    }
  }
  return nullptr;
}

std::shared_ptr<const core::PublishedWeights> WeightStore::kept_delta(int64_t version,
                                                                      int64_t base_version,
                                                                      uint32_t base_crc32c) const {
  absl::MutexLock lock(&mu_);
  return cached_delta(version, base_version, base_crc32c);
}

void WeightStore::delta_async(int64_t version, int64_t base_version, uint32_t base_crc32c,
                              DeltaCallback done) {
  std::shared_ptr<const core::PublishedWeights> ready;
  if (deltas_.level > 0 && base_version != version) {
    absl::MutexLock lock(&mu_);
    deltas_asked_ = true;
    ready = cached_delta(version, base_version, base_crc32c);
    if (ready == nullptr) {
      std::shared_ptr<const core::PublishedWeights> next = held(version), base = held(base_version);
      if (next != nullptr && base != nullptr && base->crc32c == base_crc32c) {
        queue_delta(std::move(next), std::move(base), std::move(done));
        return;
      }
    }
  }
  done(std::move(ready));
}

std::shared_ptr<const core::PublishedWeights> WeightStore::delta(int64_t version,
                                                                 int64_t base_version,
                                                                 uint32_t base_crc32c) {
  absl::Notification answered;
  std::shared_ptr<const core::PublishedWeights> out;
  delta_async(version, base_version, base_crc32c,
              [&](std::shared_ptr<const core::PublishedWeights> d) {
                out = std::move(d);
                answered.Notify();
              });
  answered.WaitForNotification();
  return out;
}

void WeightStore::queue_delta(std::shared_ptr<const core::PublishedWeights> next,
                              std::shared_ptr<const core::PublishedWeights> base,
                              DeltaCallback done) {
  for (DeltaJob& job : delta_jobs_) {
    if (job.next->version == next->version && job.base->version == base->version &&
        job.base->crc32c == base->crc32c) {
      if (done) job.waiting.push_back(std::move(done));
      return;
    }
  }
  DeltaJob job{std::move(next), std::move(base), {}};
  if (done) job.waiting.push_back(std::move(done));
  delta_jobs_.push_back(std::move(job));
  if (!encoder_.joinable()) encoder_ = std::thread([this] { encode_deltas(); });
  jobs_changed_.Signal();
}

void WeightStore::encode_deltas() {
  for (;;) {
    std::shared_ptr<const core::PublishedWeights> next, base;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && delta_jobs_.empty()) jobs_changed_.Wait(&mu_);
      if (stopping_) return;
      encoding_ = true;
      next = delta_jobs_.front().next;
      base = delta_jobs_.front().base;
    }
    std::shared_ptr<const core::PublishedWeights> d = encode(*next, *base);
    std::vector<DeltaCallback> waiting;
    {
      absl::MutexLock lock(&mu_);
      waiting = std::move(delta_jobs_.front().waiting);
      delta_jobs_.pop_front();
      encoding_ = false;
    }
    for (DeltaCallback& done : waiting) done(d);
  }
}

std::shared_ptr<const core::PublishedWeights> WeightStore::encode(
    const core::PublishedWeights& next, const core::PublishedWeights& base) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> bytes = encode_weight_delta(base, next, deltas_, &delta_buffers_);
  if (!bytes.ok()) return nullptr;  // another layout: the asker fetches the version whole
  auto d = std::make_shared<core::PublishedWeights>();
  d->version = next.version;
  d->bucket_bytes = next.bucket_bytes;
  d->payload = std::move(*bytes);
  fill_checksums(d.get());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  absl::MutexLock lock(&mu_);
  kept_deltas_.push_back({next.version, base.version, base.crc32c, d});
  if (kept_deltas_.size() > kKeptDeltas) kept_deltas_.pop_front();
  ++delta_counters_.encoded;
  delta_counters_.encode_s += seconds;
  delta_counters_.bytes += d->payload.size();
  delta_counters_.full_bytes += next.payload.size();
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
