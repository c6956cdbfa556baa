// Reads one YAML document (a file or a --set override) into a Config, strictly.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "config_error.h"
#include "flywheel/core/config.h"
#include "yaml-cpp/yaml.h"

namespace flywheel::core {

class YamlOptionsReader : public FieldBinder {
 public:
  struct Context {
    std::string source;         // file path, or "--set key=value"
    bool has_positions = true;  // false: YAML marks are meaningless (--set values)
    std::set<std::string> root_keys_handled_elsewhere;    // e.g. "include"
    const std::vector<std::string>* all_paths = nullptr;  // every valid key path (suggestions)
    std::vector<ConfigError>* errors = nullptr;           // appended to
    std::map<std::string, SourceLocation>* set_locations = nullptr;  // path -> last writer
  };

  YamlOptionsReader(Context context, YAML::Node root);

  // Applies every key of the document to `config`; values not named keep their current value.
  // Each problem is appended to context.errors; the fields that were read correctly are kept.
  void read(Config& config);

  void field(absl::string_view key, bool* value, const FieldInfo& info) override;
  void field(absl::string_view key, int64_t* value, const FieldInfo& info) override;
  void field(absl::string_view key, double* value, const FieldInfo& info) override;
  void field(absl::string_view key, std::string* value, const FieldInfo& info) override;
  void field(absl::string_view key, std::vector<std::string>* value,
             const FieldInfo& info) override;
  void field(absl::string_view key, std::map<std::string, std::string>* value,
             const FieldInfo& info) override;

 protected:
  bool begin_section(absl::string_view key, absl::string_view doc) override;
  void end_section() override;
  void bind_list(absl::string_view key, absl::string_view doc, const ListBinding& binding) override;

 private:
  struct Frame {
    YAML::Node node;  // a map, or undefined when the section is absent
    std::string path;
    std::vector<std::string> known_keys;  // full paths of the keys bound so far
    bool present = false;
  };

  // The value node of `key` in the current section (undefined when absent). Records `key` as
  // known, and the location of the value when present.
  YAML::Node lookup(absl::string_view key);
  void report_unknown_keys(const Frame& frame);
  SourceLocation location_of(const YAML::Node& node) const;
  void error(const YAML::Node& node, const std::string& path, std::string message);
  std::string path_of(absl::string_view key) const;

  Context context_;
  std::vector<Frame> frames_;
};

}  // namespace flywheel::core
