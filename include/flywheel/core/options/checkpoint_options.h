// `checkpoint:` — periodic checkpoints and resume.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

struct CheckpointOptions {
  std::string dir;              // "" = <logging.run_dir>/checkpoints
  int64_t every_steps = 0;      // 0 = only at the end
  int64_t keep_last = 3;        // older step directories are deleted; 0 = keep all
  std::string resume = "auto";  // auto (latest COMPLETE checkpoint) | never | a step directory
  bool export_hf = true;        // also write a Hugging Face directory at the end
};

void bind_options(FieldBinder& b, CheckpointOptions& o);

// What checkpoint.resume asks for: the newest COMPLETE checkpoint ("auto"), a fresh start
// ("never"), or the step directory it names (anything else).
enum class ResumeFrom { kLatest, kNever, kDirectory };
ResumeFrom resume_from(const CheckpointOptions& o);

}  // namespace flywheel::core
