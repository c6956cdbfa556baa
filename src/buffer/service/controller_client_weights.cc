// ControllerClient, its weights: fetch_weights / fetch_weights_into (whole versions and deltas,
// docs/controller.md "Weights").
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client_stub.h"
#include "flywheel/buffer/weight_delta.h"
#include "flywheel/core/crc32c.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::buffer {
namespace {

// Times fetch_weights() re-requests a bucket whose checksum failed.
constexpr int kBucketRetries = 3;

// The CRC-32C of `total` bytes from those of their `bucket_bytes` pieces.
uint32_t combine_crcs(const std::vector<uint32_t>& crcs, uint64_t total, uint64_t bucket_bytes) {
  uint32_t crc = 0;
  for (uint64_t i = 0; i < crcs.size(); ++i) {
    crc = core::crc32c_combine(crc, crcs[i], std::min(bucket_bytes, total - i * bucket_bytes));
  }
  return crc;
}

std::vector<uint32_t> bucket_crcs(const std::string& payload, uint64_t bucket_bytes) {
  std::vector<uint32_t> crcs;
  for (uint64_t at = 0; at < payload.size(); at += bucket_bytes) {
    crcs.push_back(core::crc32c_extend(0, payload.data() + at,
                                       std::min<uint64_t>(bucket_bytes, payload.size() - at)));
  }
  return crcs;
}

}  // namespace

absl::StatusOr<std::optional<core::PublishedWeights>> ControllerClient::fetch_weights(
    int64_t newer_than, double timeout_s) {
  core::PublishedWeights weights;
  FLYWHEEL_ASSIGN_OR_RETURN(bool fetched, fetch_weights_into(newer_than, timeout_s, &weights));
  if (!fetched) return std::nullopt;
  return std::optional<core::PublishedWeights>(std::move(weights));
}

absl::StatusOr<bool> ControllerClient::fetch_weights_into(int64_t newer_than, double timeout_s,
                                                          core::PublishedWeights* out) {
  const SystemClock::time_point deadline = after_seconds(timeout_s);
  const auto timed_out = [&] {
    return absl::DeadlineExceededError(absl::StrCat("fetching weights from the controller at ",
                                                    options_.address, " took longer than ",
                                                    timeout_s, " s"));
  };
  // Runs `call(context)` with the token and the transfer's deadline (and, for unary calls, the
  // per-call one), again after UNAVAILABLE with backoff while attempts and time remain.
  const auto attempt = [&](bool unary, auto&& call) {
    double backoff = options_.backoff_initial_s;
    absl::Status s;
    for (int i = 0; i < options_.max_attempts; ++i) {
      if (SystemClock::now() >= deadline) return timed_out();
      grpc::ClientContext context;
      context.set_deadline(unary ? std::min(deadline, after_seconds(options_.deadline_s))
                                 : deadline);
      if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
      s = call(&context);
      if (s.code() == absl::StatusCode::kDeadlineExceeded && SystemClock::now() >= deadline) {
        return timed_out();
      }
      if (s.code() != absl::StatusCode::kUnavailable || no_weights_yet(s)) return s;
      ++reconnects_;
      const double wait =
          std::min(backoff, std::chrono::duration<double>(deadline - SystemClock::now()).count());
      if (wait <= 0) return timed_out();
      if (stop_.WaitForNotificationWithTimeout(absl::Seconds(wait))) break;
      backoff = std::min(backoff * 2, options_.backoff_max_s);
    }
    return s;
  };

  // Streams `total` bytes of `request`'s version (or of its delta) into `*into` in buckets of
  // `bucket_bytes`, resuming a broken stream, re-requesting bad buckets; checks the whole
  // against `crc` and leaves the buckets' checksums in `*crcs`.
  const auto stream_all = [&](v1::WeightsRequest request, uint64_t total, uint64_t bucket_bytes,
                              uint32_t crc, std::string* into,
                              std::vector<uint32_t>* crcs) -> absl::Status {
    into->resize(total);  // in place when the capacity suffices: no page faults
    WeightsTransfer transfer;
    transfer.version = request.version();
    transfer.bucket_bytes = bucket_bytes;
    transfer.payload = into;
    const uint64_t buckets = (total + bucket_bytes - 1) / bucket_bytes;
    transfer.crcs.assign(buckets, 0);
    transfer.bad.assign(buckets, 0);
    transfer.corrupt = &options_.corrupt_bucket_for_test;
    // Every bucket, resuming after the last one received when the stream breaks.
    uint64_t next = 0;
    FLYWHEEL_RETURN_IF_ERROR(attempt(false, [&](grpc::ClientContext* c) {
      request.set_offset(next);
      return stream_weights_once(&stub_->weights, c, request, &transfer, &next);
    }));
    // The buckets whose checksum failed, again.
    for (uint64_t i = 0; i < buckets; ++i) {
      const uint64_t at = i * bucket_bytes;
      request.set_offset(at);
      request.set_length(std::min(bucket_bytes, total - at));
      for (int retry = 0; transfer.bad[i] && retry < kBucketRetries; ++retry) {
        FLYWHEEL_RETURN_IF_ERROR(attempt(false, [&](grpc::ClientContext* c) {
          uint64_t received_to = 0;
          return stream_weights_once(&stub_->weights, c, request, &transfer, &received_to);
        }));
      }
      if (transfer.bad[i]) {
        return absl::DataLossError(
            absl::StrCat("weights version ", request.version(), request.delta() ? " (delta)" : "",
                         ": bucket ", i, " failed its crc32c ", 1 + kBucketRetries, " times"));
      }
    }
    const uint32_t received = combine_crcs(transfer.crcs, total, bucket_bytes);
    if (received != crc) {
      return absl::DataLossError(absl::StrFormat(
          "weights version %d%s: the payload's crc32c %08x differs from the manifest's %08x",
          request.version(), request.delta() ? " (delta)" : "", received, crc));
    }
    *crcs = std::move(transfer.crcs);
    return absl::OkStatus();
  };

  absl::MutexLock fetching(&fetch_mu_);
  const auto started = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  core::PublishedWeights& weights = *out;
  // A delta applies to what `*out` holds: a version fetched whole and intact (its bucket
  // checksums are cleared before anything overwrites it), the one the caller knows.
  bool try_delta = options_.weight_deltas && weights.version == newer_than &&
                   !weights.bucket_crc32c.empty() && !weights.payload.empty();
  v1::WeightsRequest request;
  request.set_max_bucket_bytes(max_bucket_for(options_.max_message_bytes));
  while (true) {  // once more each time the version being fetched is dropped (NOT_FOUND)
    request.set_latest(true);
    request.clear_version();
    request.clear_offset();
    request.clear_length();
    request.set_delta(try_delta);
    if (try_delta) {
      request.set_delta_from(weights.version);
      request.set_delta_from_crc32c(weights.crc32c);
    }
    v1::WeightsManifest manifest;
    absl::Status s = attempt(true, [&](grpc::ClientContext* c) {
      manifest.Clear();
      return from_grpc(stub_->stub->GetWeightsManifest(c, request, &manifest));
    });
    if (no_weights_yet(s)) return false;
    if (!s.ok()) return s;
    if (manifest.version() <= newer_than) return false;

    std::vector<core::WeightTensor> tensors;
    tensors.reserve(manifest.tensors_size());
    for (const v1::TensorEntry& e : manifest.tensors()) {
      tensors.push_back(
          {e.name(), e.dtype(), {e.shape().begin(), e.shape().end()}, e.offset(), e.size()});
    }
    const uint64_t total = manifest.total_bytes();
    const uint64_t bucket_bytes = manifest.bucket_bytes();
    if (bucket_bytes < 1) return absl::DataLossError("weights manifest: bucket_bytes 0");
    if (absl::Status v = core::validate_tensors(tensors, total); !v.ok()) {
      return absl::DataLossError(absl::StrCat("weights manifest: ", v.message()));
    }
    request.set_latest(false);
    request.set_version(manifest.version());

    if (try_delta && manifest.delta()) {
      // The delta's bytes, applied to the held version, then the result checked against the
      // version's own checksum: a wrong base or a bad delta is fetched whole instead.
      s = absl::OkStatus();
      if (manifest.delta_from() != weights.version || total != weights.payload.size() ||
          !same_layout(tensors, weights.tensors)) {
        s = absl::DataLossError("the delta offered is not from the version held");
      }
      std::vector<uint32_t> delta_crcs;
      if (s.ok()) {
        s = stream_all(request, manifest.delta_bytes(), bucket_bytes, manifest.delta_crc32c(),
                       &delta_bytes_, &delta_crcs);
      }
      if (s.ok()) {
        weights.bucket_crc32c.clear();
        s = apply_weight_delta(delta_bytes_, tensors, &weights.payload, &delta_buffers_);
      }
      std::vector<uint32_t> crcs;
      if (s.ok()) {
        crcs = bucket_crcs(weights.payload, bucket_bytes);
        const uint32_t crc = combine_crcs(crcs, total, bucket_bytes);
        if (crc != manifest.crc32c()) {
          s = absl::DataLossError(absl::StrFormat(
              "weights version %d from the delta of version %d: crc32c %08x, the manifest's %08x",
              manifest.version(), manifest.delta_from(), crc, manifest.crc32c()));
        }
      }
      if (s.ok()) {
        weights.version = manifest.version();
        weights.bucket_bytes = bucket_bytes;
        weights.tensors = std::move(tensors);
        weights.crc32c = manifest.crc32c();
        weights.bucket_crc32c = std::move(crcs);
        ++fetch_counters_.deltas;
        fetch_counters_.bytes += manifest.delta_bytes();
        fetch_counters_.delta_s += elapsed();
        return true;
      }
      const absl::StatusCode code = s.code();
      if (code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kCancelled ||
          code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kUnauthenticated) {
        return s;  // the controller, not the delta
      }
      if (code != absl::StatusCode::kNotFound) {  // not merely replaced by a newer version
        ++fetch_counters_.delta_failures;
        FLYWHEEL_LOG_WARN("weights version %d: %s; fetching it whole", manifest.version(),
                          s.message());
      }
      try_delta = false;
      request.clear_delta();
      request.clear_delta_from();
      request.clear_delta_from_crc32c();
      continue;
    }

    weights.bucket_crc32c.clear();  // from here on `*out` holds no intact version
    weights.version = manifest.version();
    weights.bucket_bytes = bucket_bytes;
    weights.tensors = std::move(tensors);
    request.clear_delta();
    std::vector<uint32_t> crcs;
    s = stream_all(request, total, bucket_bytes, manifest.crc32c(), &weights.payload, &crcs);
    if (s.code() == absl::StatusCode::kNotFound) continue;  // dropped: fetch the newest
    if (!s.ok()) return s;
    weights.crc32c = manifest.crc32c();
    weights.bucket_crc32c = std::move(crcs);
    ++fetch_counters_.full;
    fetch_counters_.bytes += total;
    fetch_counters_.full_s += elapsed();
    return true;
  }
}

ControllerClient::WeightFetchCounters ControllerClient::weight_fetch_counters() const {
  absl::MutexLock lock(&fetch_mu_);
  return fetch_counters_;
}

}  // namespace flywheel::buffer
