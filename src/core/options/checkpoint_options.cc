#include "flywheel/core/options/checkpoint_options.h"

namespace flywheel::core {

void bind_options(FieldBinder& b, CheckpointOptions& o) {
  b.field("dir", &o.dir, FieldInfo("Checkpoint directory. Empty: <logging.run_dir>/checkpoints."));
  b.field("every_steps", &o.every_steps,
          FieldInfo("Checkpoint every N optimizer steps; 0 = only at the end.").min(0));
  b.field("keep_last", &o.keep_last,
          FieldInfo("Keep this many newest checkpoints; 0 = keep all.").min(0));
  b.field("resume", &o.resume,
          FieldInfo("auto: resume from the newest COMPLETE checkpoint; never; or the path of a "
                    "step directory."));
  b.field("export_hf", &o.export_hf,
          FieldInfo("Also write a Hugging Face directory (safetensors + config.json) at the end."));
}

ResumeFrom resume_from(const CheckpointOptions& o) {
  if (o.resume == "auto") return ResumeFrom::kLatest;
  if (o.resume == "never") return ResumeFrom::kNever;
  return ResumeFrom::kDirectory;
}

}  // namespace flywheel::core
