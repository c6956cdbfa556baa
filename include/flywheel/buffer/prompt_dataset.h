// The prompt dataset the controller hands out: one JSON object per line of a JSONL file, each
// with "prompt" (a string) or "messages" (a list), optionally "answer" and any metadata.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel::buffer {

class PromptDataset {
 public:
  // Errors name the file and line: unreadable file, malformed JSON, a line that is not valid
  // UTF-8, a line without a string "prompt" or a list "messages" (keys configurable), an empty
  // file.
  static absl::StatusOr<std::unique_ptr<PromptDataset>> load(
      const std::string& path, const std::string& prompt_key = "prompt",
      const std::string& messages_key = "messages");
  static absl::StatusOr<std::unique_ptr<PromptDataset>> from_lines(
      std::vector<std::string> lines, const std::string& source,
      const std::string& prompt_key = "prompt", const std::string& messages_key = "messages");

  int64_t size() const { return static_cast<int64_t>(lines_.size()); }
  // The JSON text of prompt `index` (0 <= index < size()).
  const std::string& line(int64_t index) const { return lines_[index]; }
  int64_t max_line_bytes() const;
  // A 64-bit hash (FNV-1a) of the prompts' text and order: the dataset's identity in controller
  // snapshots.
  uint64_t fingerprint() const;

 private:
  explicit PromptDataset(std::vector<std::string> lines) : lines_(std::move(lines)) {}
  std::vector<std::string> lines_;
};

}  // namespace flywheel::buffer
