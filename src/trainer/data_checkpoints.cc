#include "flywheel/trainer/data_checkpoints.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/trainer/learner_job.h"

namespace flywheel::trainer {

absl::StatusOr<DataCheckpoints> DataCheckpoints::create(const core::Config& config,
                                                        const std::string& tokenizer_dir) {
  DataCheckpoints c;
  c.config_ = &config;
  c.dir_ = checkpoint_dir(config);
  c.save_options_.keep_last = config.checkpoint.keep_last;
  FLYWHEEL_ASSIGN_OR_RETURN(c.save_options_.extra_files, checkpoint_side_files(tokenizer_dir));
  return c;
}

absl::StatusOr<std::map<std::string, double>> DataCheckpoints::resume(const TrainingState& state,
                                                                      comm::Communicator& world,
                                                                      int64_t records,
                                                                      SftCursor* cursor) {
  const std::string from = resume_path(*config_, world);
  if (from.empty()) return std::map<std::string, double>();
  FLYWHEEL_ASSIGN_OR_RETURN(auto scalars, load_checkpoint(state, world, from));
  FLYWHEEL_ASSIGN_OR_RETURN(*cursor, restore_cursor(scalars, records, from));
  last_saved_ = scalars.count("steps") ? static_cast<int64_t>(scalars.at("steps")) : 0;
  if (world.rank() == 0) FLYWHEEL_LOG_INFO("resumed from %s at step %d", from, last_saved_);
  return scalars;
}

absl::Status DataCheckpoints::save(TrainingState state, comm::Communicator& world, int64_t step,
                                   const SftCursor& cursor, int64_t records) {
  if (step == last_saved_) return absl::OkStatus();
  save_cursor(cursor, records, &state.scalars);
  FLYWHEEL_RETURN_IF_ERROR(save_checkpoint(state, world, dir_, step, save_options_));
  last_saved_ = step;
  return absl::OkStatus();
}

absl::StatusOr<std::string> DataCheckpoints::export_last(const std::string& model,
                                                         at::ScalarType dtype) const {
  return export_run((std::filesystem::path(dir_) / absl::StrCat("step_", last_saved_)).string(),
                    model, config_->logging.run_dir, dtype);
}

}  // namespace flywheel::trainer
