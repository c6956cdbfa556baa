// RolloutWorker, its weights: the fetcher thread (fetch_loop), applying what it fetched to the
// engine between generation steps (apply_weights, which waits when a grant needs a newer
// version), and acknowledging applied versions with their checksum (maybe_acknowledge).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/buffer/controller_core.h"
#include "flywheel/core/logging.h"
#include "flywheel/rollout/worker/rollout_worker.h"
#include "worker_wait.h"

namespace flywheel::rollout {

void RolloutWorker::fetch_loop() {
  int64_t known = -1;
  while (!stopping_.load()) {
    // Into the buffer of an update already applied, when there is one: a fresh payload of a
    // large model costs seconds of page faults.
    std::shared_ptr<core::PublishedWeights> into;
    {
      absl::MutexLock lock(&fetch_mu_);
      into = spare_ ? std::move(spare_) : std::make_shared<core::PublishedWeights>();
      if (forget_fetched_) known = -1;
      forget_fetched_ = false;
    }
    absl::StatusOr<bool> got = weights_->fetch_into(known, options_.weight_timeout_s, into.get());
    {
      absl::MutexLock lock(&fetch_mu_);
      if (forget_fetched_) {
        // A restart began during this fetch: what it got may be of the old controller.
        if (!spare_) spare_ = std::move(into);
      } else if (got.ok() && *got) {
        known = into->version;
        fetched_ = std::move(into);
        fetched_version_ = known;
      } else if (!spare_) {
        spare_ = std::move(into);
      }
      if (!got.ok()) fetch_error_ = got.status();
    }
    weights_finished_.store(weights_->finished());
    fetch_cv_.SignalAll();
    absl::MutexLock lock(&fetch_mu_);
    wait_until(&fetch_cv_, &fetch_mu_, absl::Now() + absl::Seconds(options_.poll_interval_s),
               [this] { return stopping_.load(); });
  }
}

absl::Status RolloutWorker::apply_weights(int64_t min_version) {
  std::shared_ptr<core::PublishedWeights> weights;
  {
    absl::MutexLock lock(&fetch_mu_);
    if (min_version > applied_version_ && fetched_version_ < min_version) {
      // The controller grants at versions it has published: wait until they arrive (or the
      // controller turns out to be another start, which publishes other versions). The fetcher
      // signals after every round, so the stop request is asked at least once per poll.
      // A controller that stops answering heartbeats ends the wait after reconnect_timeout_s,
      // as it ends every call, rather than after the longer weight timeout.
      const double silent_limit_s = client_->options().reconnect_timeout_s;
      double silent_for = 0;  // how long, when the silence ended the wait
      const auto silent = [&] {
        const double s = client_->silent_for_s();
        if (silent_limit_s > 0 && s > silent_limit_s) silent_for = s;
        return silent_for > 0;
      };
      const absl::Time deadline = absl::Now() + absl::Seconds(options_.weight_timeout_s);
      bool ready = false;
      while (!ready && absl::Now() < deadline) {  // in slices: a fetch may block for long
        ready = wait_until(&fetch_cv_, &fetch_mu_,
                           std::min(deadline, absl::Now() + absl::Seconds(0.5)), [&] {
                             return fetched_version_ >= min_version ||
                                    client_->controller_restarted() || client_->controller_done() ||
                                    stopping_.load() || (stop_ && stop_()) || silent();
                           });
      }
      if (fetched_version_ < min_version && client_->controller_done()) {
        // Told in a heartbeat that training is over: these weights may never come (the
        // controller shuts down once every worker heard it). The caller sees applied_version_
        // short of what it asked for and generates nothing more.
        return absl::OkStatus();
      }
      if (client_->controller_restarted()) {
        return absl::AbortedError(absl::StrCat(buffer::kControllerRestarted,
                                               " while waiting for weights v", min_version));
      }
      const bool stopping = stopping_.load() || (stop_ && stop_());
      // Ended by the silence (a heartbeat may have been answered since): an error all the same,
      // never a return without the weights asked for.
      if (fetched_version_ < min_version && ready && !stopping) {
        return absl::UnavailableError(absl::StrFormat(
            "the controller at %s did not answer heartbeats for %.1f s "
            "(buffer.server.reconnect_timeout_s %g) while this worker waited for weights v%d%s",
            client_->options().address, silent_for, silent_limit_s, min_version,
            fetch_error_.ok() ? "" : absl::StrCat("; last fetch error: ", fetch_error_.message())));
      }
      if (!ready) {
        return absl::DeadlineExceededError(absl::StrCat(
            "no weights of version ", min_version, " after ", options_.weight_timeout_s,
            " s (weight_sync.timeout_s)",
            fetch_error_.ok() ? "" : absl::StrCat("; last error: ", fetch_error_.message())));
      }
    }
    weights = std::move(fetched_);
    fetched_.reset();
  }
  if (!weights || weights->version <= applied_version_) return absl::OkStatus();
  const auto start = Clock::now();
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> tensors =
      payload_tensors(*weights);
  if (!tensors.ok()) return tensors.status();
  absl::Status s = engine_->update_weights(*tensors, weights->version);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("weights v", weights->version, ": ", s.message()));
  }
  applied_version_ = weights->version;
  applied_manifest_ = weights->tensors;
  {
    absl::MutexLock lock(&fetch_mu_);
    spare_ = std::move(weights);  // staged (copied): the fetcher may reuse its memory
  }
  absl::MutexLock lock(&stats_mu_);
  ++stats_.weight_updates;
  stats_.weight_stage_s += seconds_since(start);
  return absl::OkStatus();
}

void RolloutWorker::maybe_acknowledge() {
  const int64_t version = engine_->version();
  if (version <= acked_version_ || version != applied_version_) return;
  acked_version_ = version;
  uint32_t crc = 0;
  if (options_.verify_weights) {
    absl::StatusOr<uint32_t> computed = parameters_crc32c(engine_->model(), applied_manifest_);
    if (!computed.ok()) {
      FLYWHEEL_LOG_WARN("cannot checksum weights v%d: %s", version, computed.status().message());
      return;
    }
    crc = *computed;
  }
  absl::Status s = client_->ack_weights(version, crc);
  if (!s.ok()) FLYWHEEL_LOG_WARN("weights v%d not acknowledged: %s", version, s.message());
}

}  // namespace flywheel::rollout
