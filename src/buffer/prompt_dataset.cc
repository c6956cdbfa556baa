#include "flywheel/buffer/prompt_dataset.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "flywheel/core/json.h"
#include "flywheel/core/utf8.h"

namespace flywheel::buffer {

absl::StatusOr<std::unique_ptr<PromptDataset>> PromptDataset::load(
    const std::string& path, const std::string& prompt_key, const std::string& messages_key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read prompt file '", path, "'"));
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return from_lines(std::move(lines), path, prompt_key, messages_key);
}

absl::StatusOr<std::unique_ptr<PromptDataset>> PromptDataset::from_lines(
    std::vector<std::string> lines, const std::string& source, const std::string& prompt_key,
    const std::string& messages_key) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string& line = lines[i];
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = absl::StrCat(source, ":", i + 1);
    // Lines travel to workers in protobuf strings, which must be UTF-8.
    if (!core::is_valid_utf8(line)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": not valid UTF-8"));
    }
    absl::StatusOr<core::Json> json = core::Json::parse(line);
    if (!json.ok())
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", json.status().message()));
    const core::Json* prompt = json->find(prompt_key);
    const core::Json* messages = json->find(messages_key);
    if (!(prompt && prompt->is_string()) && !(messages && messages->is_array())) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": needs a string \"", prompt_key,
                                                     "\" or a list \"", messages_key, "\""));
    }
    kept.push_back(std::move(line));
  }
  if (kept.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": no prompts"));
  return std::unique_ptr<PromptDataset>(new PromptDataset(std::move(kept)));
}

int64_t PromptDataset::max_line_bytes() const {
  size_t longest = 0;
  for (const std::string& line : lines_) longest = std::max(longest, line.size());
  return static_cast<int64_t>(longest);
}

uint64_t PromptDataset::fingerprint() const {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](unsigned char byte) { h = (h ^ byte) * 1099511628211ull; };
  for (const std::string& line : lines_) {
    for (char c : line) mix(static_cast<unsigned char>(c));
    mix('\n');
  }
  return h;
}

}  // namespace flywheel::buffer
