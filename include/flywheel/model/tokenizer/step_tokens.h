// A prompt and its reasoning steps as one token sequence, the layout a process reward model
// (PRM) is trained on and scored with: the prompt tokenized as text (special tokens as the
// tokenizer adds them), then each step tokenized on its own, with the separator appended, and
// the step's label read at its last token (as TRL's PRM trainer lays steps out).
//
//   StepTokens t = encode_steps(tokenizer, "12+34=", {"6", "4"}, "");  // per-digit steps
//   // t.ids = prompt ids + "6" + "4"; t.step_ends = {P + 1, P + 2}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "flywheel/model/tokenizer/tokenizer.h"

namespace flywheel::model {

struct StepTokens {
  std::vector<int64_t> ids;        // prompt, then every step (with its separator)
  int64_t prompt_tokens = 0;       // ids[0, prompt_tokens) are the prompt's
  std::vector<int64_t> step_ends;  // index just past step k's last token in `ids`
};

// InvalidArgument for a step that is empty with its separator (nothing to read a label at), or
// text that is not valid UTF-8.
absl::StatusOr<StepTokens> encode_steps(const Tokenizer& tokenizer, absl::string_view prompt,
                                        const std::vector<std::string>& steps,
                                        absl::string_view separator);

// One step of a completion's text.
struct TextStep {
  std::string text;  // without its separator
  size_t end = 0;    // offset in the completion just past the step and its separator
};

// The steps of `completion` cut at every non-empty `separator`, as encode_steps() takes them
// (a last piece without a separator is a step too). Empty pieces (separators in a row) are no
// steps: their separators end the step before.
std::vector<TextStep> split_steps(absl::string_view completion, absl::string_view separator);

}  // namespace flywheel::model
