#include "flywheel/trainer/controller_batch_source.h"

#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::trainer {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int64_t ControllerBatchSource::progress() const {
  const buffer::ControllerCounters k = core_->counters();
  return k.accepted + k.duplicates + k.filtered + k.stale_dropped + k.stale_requeued +
         k.rejected_invalid + k.rejected_lease + k.rejected_full + k.dropped;
}

absl::Status ControllerBatchSource::log_prompts(
    int64_t step, const std::vector<buffer::PromptRef>& prompts) const {
  if (options_.prompts_log.empty()) return absl::OkStatus();
  std::string line = absl::StrCat("{\"step\": ", step, ", \"prompts\": [");
  for (size_t i = 0; i < prompts.size(); ++i) {
    absl::StrAppend(&line, i ? ", " : "", "[", prompts[i].epoch, ", ", prompts[i].prompt, "]");
  }
  std::ofstream out(options_.prompts_log, std::ios::app);
  out << line << "]}\n" << std::flush;
  if (!out) return absl::InternalError(absl::StrCat("cannot append to ", options_.prompts_log));
  return absl::OkStatus();
}

absl::StatusOr<TrainingBatch> ControllerBatchSource::next(int64_t version,
                                                          const StopRequested& stop) {
  TrainingBatch batch;
  if (version != waiting_for_) {  // the deadline counts the wait, not the last step
    waiting_for_ = version;
    last_progress_at_ = Clock::now();
  }
  const auto wait_start = Clock::now();
  while (true) {
    if (stop && stop()) {
      batch.kind = TrainingBatch::Kind::kStop;
      return batch;
    }
    // Leases of workers gone silent are re-issued even while no worker asks for work.
    core_->expire(buffer::monotonic_seconds());
    const bool drained = core_->drained();  // before buffered(): no push lost between
    if (core_->buffered() >= options_.groups_per_step) {
      std::vector<buffer::PromptRef> prompts;
      auto taken = core_->take_batch(options_.groups_per_step, &prompts);
      if (taken.ok()) {
        batch.kind = TrainingBatch::Kind::kGroups;
        batch.groups = std::move(*taken);
        // The last step's batch: nothing more will be trained, so nothing more is granted
        // (workers hear "done" and stop; what they still push is drained by settle()).
        if (version + 1 >= options_.total_steps) core_->close();
        FLYWHEEL_RETURN_IF_ERROR(log_prompts(version + 1, prompts));
        return batch;
      }
    }
    if (drained) {
      batch.kind = TrainingBatch::Kind::kExhausted;
      return batch;
    }
    const int64_t now_progress = progress();
    if (now_progress != last_progress_) {
      last_progress_ = now_progress;
      last_progress_at_ = Clock::now();
    } else if (options_.no_progress_timeout_s > 0 &&
               seconds_since(last_progress_at_) > options_.no_progress_timeout_s) {
      batch.kind = TrainingBatch::Kind::kNoProgress;
      batch.why = absl::StrFormat(
          "no group arrived for %.0f s (trainer.no_progress_timeout_s): %d of %d groups "
          "buffered, %d prompts leased; %s; are the rollout workers running? (their logs are "
          "in %s)",
          seconds_since(last_progress_at_), core_->buffered(), options_.groups_per_step,
          core_->in_flight(), core_->workers_heard(buffer::monotonic_seconds()),
          options_.workers_logs);
      return batch;
    }
    if (seconds_since(last_note_) > 30) {
      FLYWHEEL_LOG_INFO("waiting for rollout workers: %d of %d groups buffered, %d prompts leased",
                        core_->buffered(), options_.groups_per_step, core_->in_flight());
      last_note_ = Clock::now();
    }
    if (seconds_since(wait_start) > options_.wait_answer_s) {
      batch.kind = TrainingBatch::Kind::kWait;
      return batch;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool ControllerBatchSource::settle(double timeout_s) {
  core_->close();  // workers hear "done" (acquiring or in a heartbeat) and stop
  const auto start = Clock::now();
  while (!core_->settled(buffer::monotonic_seconds()) && seconds_since(start) < timeout_s) {
    core_->expire(buffer::monotonic_seconds());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return core_->settled(buffer::monotonic_seconds());
}

absl::Status ControllerBatchSource::truncate_prompts_log(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return absl::OkStatus();
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    absl::StatusOr<core::Json> json = core::Json::parse(line);
    if (!json.ok()) break;  // a torn last line from a kill
    const core::Json* s = json->find("step");
    if (s != nullptr && s->is_integer() && s->as_int() <= step) kept += line + "\n";
  }
  return core::write_file_atomically(path, kept);
}

}  // namespace flywheel::trainer
