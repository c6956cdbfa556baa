#include "yaml_options_reader.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "key_suggestion.h"

namespace flywheel::core {
namespace {

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Scalar:
      return absl::StrCat("'", node.Scalar(), "'");
    default:
      return "nothing";
  }
}

bool parse_bool(const std::string& text, bool* out) {
  if (text == "true" || text == "True" || text == "TRUE") {
    *out = true;
    return true;
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    *out = false;
    return true;
  }
  return false;
}

bool parse_int(const std::string& text, int64_t* out) {
  if (text.empty() || text.front() == ' ' || text.back() == ' ') return false;
  return absl::SimpleAtoi(text, out);
}

bool parse_double(const std::string& text, double* out) {
  if (text.empty() || text.front() == ' ' || text.back() == ' ') return false;
  if (!absl::SimpleAtod(text, out)) return false;
  return std::isfinite(*out);
}

}  // namespace

YamlOptionsReader::YamlOptionsReader(Context context, YAML::Node root)
    : context_(std::move(context)) {
  Frame frame;
  frame.node = std::move(root);
  frame.present = true;
  frames_.push_back(std::move(frame));
}

void YamlOptionsReader::read(Config& config) {
  const YAML::Node& root = frames_.front().node;
  if (!root || root.IsNull()) return;  // an empty document sets nothing
  if (!root.IsMap()) {
    error(root, "",
          absl::StrCat("expected a map of sections at the top level, got ", describe(root)));
    return;
  }
  bind_options(*this, config);
  report_unknown_keys(frames_.front());
}

std::string YamlOptionsReader::path_of(absl::string_view key) const {
  return join_key_path(frames_.back().path, key);
}

SourceLocation YamlOptionsReader::location_of(const YAML::Node& node) const {
  SourceLocation where;
  where.source = context_.source;
  if (context_.has_positions && node.IsDefined()) {
    YAML::Mark mark = node.Mark();
    if (mark.line >= 0) {
      where.line = mark.line + 1;
      where.column = mark.column + 1;
    }
  }
  return where;
}

void YamlOptionsReader::error(const YAML::Node& node, const std::string& path,
                              std::string message) {
  context_.errors->push_back({location_of(node), path, std::move(message)});
}

YAML::Node YamlOptionsReader::lookup(absl::string_view key) {
  Frame& frame = frames_.back();
  std::string path = path_of(key);
  frame.known_keys.push_back(path);
  if (!frame.present) return YAML::Node(YAML::NodeType::Undefined);
  for (const auto& entry : frame.node) {
    if (entry.first.IsScalar() && entry.first.Scalar() == key) {
      if (context_.set_locations) (*context_.set_locations)[path] = location_of(entry.second);
      return entry.second;
    }
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

void YamlOptionsReader::report_unknown_keys(const Frame& frame) {
  std::set<std::string> seen;
  for (const auto& entry : frame.node) {
    if (!entry.first.IsScalar()) {
      error(entry.first, frame.path, "keys must be plain strings");
      continue;
    }
    const std::string& key = entry.first.Scalar();
    std::string path = join_key_path(frame.path, key);
    if (!seen.insert(key).second) {
      error(entry.first, path, "duplicate key");
      continue;
    }
    if (frame.path.empty() && context_.root_keys_handled_elsewhere.count(key)) continue;
    bool known = false;
    for (const std::string& k : frame.known_keys) known = known || k == path;
    if (known) continue;
    std::string message = "unknown key";
    static const std::vector<std::string> kNoPaths;
    if (auto suggestion = suggest_key(path, frame.known_keys,
                                      context_.all_paths ? *context_.all_paths : kNoPaths)) {
      absl::StrAppend(&message, "; did you mean '", *suggestion, "'?");
    }
    error(entry.first, path, message);
  }
}

void YamlOptionsReader::field(absl::string_view key, bool* value, const FieldInfo& info) {
  YAML::Node node = lookup(key);
  if (!node.IsDefined()) return;
  bool parsed;
  if (!node.IsScalar() || !parse_bool(node.Scalar(), &parsed)) {
    error(node, path_of(key), absl::StrCat("expected true or false, got ", describe(node)));
    return;
  }
  *value = parsed;
}

void YamlOptionsReader::field(absl::string_view key, int64_t* value, const FieldInfo& info) {
  YAML::Node node = lookup(key);
  if (!node.IsDefined()) return;
  int64_t parsed;
  if (!node.IsScalar() || !parse_int(node.Scalar(), &parsed)) {
    error(node, path_of(key), absl::StrCat("expected an integer, got ", describe(node)));
    return;
  }
  if (auto problem = info.check_number(static_cast<double>(parsed))) {
    error(node, path_of(key), *problem);
    return;
  }
  *value = parsed;
}

void YamlOptionsReader::field(absl::string_view key, double* value, const FieldInfo& info) {
  YAML::Node node = lookup(key);
  if (!node.IsDefined()) return;
  double parsed;
  if (!node.IsScalar() || !parse_double(node.Scalar(), &parsed)) {
    error(node, path_of(key), absl::StrCat("expected a finite number, got ", describe(node)));
    return;
  }
  if (auto problem = info.check_number(parsed)) {
    error(node, path_of(key), *problem);
    return;
  }
  *value = parsed;
}

void YamlOptionsReader::field(absl::string_view key, std::string* value, const FieldInfo& info) {
  YAML::Node node = lookup(key);
  if (!node.IsDefined()) return;
  if (node.IsNull()) {  // `key:` with nothing means "unset"
    std::string empty;
    if (auto problem = info.check_string(empty)) {
      error(node, path_of(key), *problem);
      return;
    }
    value->clear();
    return;
  }
  if (!node.IsScalar()) {
    error(node, path_of(key), absl::StrCat("expected a string, got ", describe(node)));
    return;
  }
  if (auto problem = info.check_string(node.Scalar())) {
    error(node, path_of(key), *problem);
    return;
  }
  *value = node.Scalar();
}

void YamlOptionsReader::field(absl::string_view key, std::vector<std::string>* value,
                              const FieldInfo& info) {
  YAML::Node node = lookup(key);
  if (!node.IsDefined()) return;
  if (node.IsNull()) {
    value->clear();
    return;
  }
  if (!node.IsSequence()) {
    error(node, path_of(key), absl::StrCat("expected a list of strings, got ", describe(node)));
    return;
  }
  std::vector<std::string> parsed;
  for (size_t i = 0; i < node.size(); ++i) {
    if (!node[i].IsScalar()) {
      error(node[i], absl::StrCat(path_of(key), "[", i, "]"),
            absl::StrCat("expected a string, got ", describe(node[i])));
      return;
    }
    parsed.push_back(node[i].Scalar());
  }
  *value = std::move(parsed);
}

void YamlOptionsReader::field(absl::string_view key, std::map<std::string, std::string>* value,
                              const FieldInfo& info) {
  YAML::Node node = lookup(key);
  if (!node.IsDefined()) return;
  if (node.IsNull()) {
    value->clear();
    return;
  }
  if (!node.IsMap()) {
    error(node, path_of(key), absl::StrCat("expected a map of strings, got ", describe(node)));
    return;
  }
  std::map<std::string, std::string> parsed;
  for (const auto& entry : node) {
    std::string entry_path = absl::StrCat(path_of(key), ".", entry.first.Scalar());
    if (!entry.first.IsScalar() || !(entry.second.IsScalar() || entry.second.IsNull())) {
      error(entry.second, entry_path,
            absl::StrCat("expected a string value, got ", describe(entry.second)));
      return;
    }
    parsed[entry.first.Scalar()] = entry.second.IsNull() ? "" : entry.second.Scalar();
  }
  *value = std::move(parsed);
}

bool YamlOptionsReader::begin_section(absl::string_view key, absl::string_view doc) {
  YAML::Node node = lookup(key);
  Frame frame;
  frame.path = path_of(key);
  if (node.IsDefined() && !node.IsNull()) {
    if (node.IsMap()) {
      frame.node = node;
      frame.present = true;
    } else {
      error(node, frame.path, absl::StrCat("expected a map (a section), got ", describe(node)));
    }
  }
  frames_.push_back(std::move(frame));
  return frames_.back().present;
}

void YamlOptionsReader::end_section() {
  Frame frame = std::move(frames_.back());
  frames_.pop_back();
  if (frame.present) report_unknown_keys(frame);
}

void YamlOptionsReader::bind_list(absl::string_view key, absl::string_view doc,
                                  const ListBinding& binding) {
  YAML::Node node = lookup(key);
  if (!node.IsDefined()) return;
  std::string path = path_of(key);
  if (node.IsNull()) {
    binding.resize(0);
    return;
  }
  if (!node.IsSequence()) {
    error(node, path, absl::StrCat("expected a list of maps, got ", describe(node)));
    return;
  }
  binding.resize(node.size());
  for (size_t i = 0; i < node.size(); ++i) {
    Frame frame;
    frame.path = absl::StrCat(path, "[", i, "]");
    if (!node[i].IsMap()) {
      error(node[i], frame.path, absl::StrCat("expected a map, got ", describe(node[i])));
      continue;
    }
    frame.node = node[i];
    frame.present = true;
    frames_.push_back(std::move(frame));
    binding.bind_element(*this, i);
    Frame done = std::move(frames_.back());
    frames_.pop_back();
    report_unknown_keys(done);
  }
}

}  // namespace flywheel::core
