// Loading configurations: YAML files with includes, --set overrides, strict validation.
//
//   flywheel::core::ConfigLoadOptions options;
//   options.overrides = {"trainer.lr=1e-5"};
//   absl::StatusOr<LoadedConfig> loaded = load_config_file("configs/quickstart.yaml", options);
//
// Layers are applied in order onto a default Config: every file named by `include:` (a path or
// a list, relative to the including file, recursively, depth first), then the file itself, then
// each override. Sections merge key by key; lists are replaced whole.
//
// Errors: InvalidArgument whose message lists every problem found, one per line, as
// "file:line:column: key.path: problem" -- unknown keys (with "did you mean 'trainer.lr'?"),
// wrong types, out-of-range values, unreadable or cyclic includes, YAML syntax errors and
// cross-field rules. Nothing is partially applied on error: the caller gets no Config.
#pragma once

#include <map>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "flywheel/core/config.h"

namespace flywheel::core {

struct ConfigLoadOptions {
  std::vector<std::string> overrides;  // "path.to.key=value"; the value is parsed as YAML
  int max_include_depth = 16;
};

struct LoadedConfig {
  Config config;
  std::vector<std::string> files;  // every file applied, in order (includes first)
  // Key paths written by a file or an override -> where the winning value came from
  // ("configs/a.yaml:12:3" or "--set trainer.lr=1e-5"). Paths absent here hold defaults.
  std::map<std::string, std::string> origins;

  bool is_set(const std::string& path) const { return origins.count(path) > 0; }
};

class PluginRegistry;

// Checks that every component named in `loaded.config` exists in `registry` (built-ins plus
// loaded plugins): logging.sinks, and -- when their kinds are registered -- the algorithm's
// advantage_estimator, policy_loss, is_correction and buffer.filter. InvalidArgument names the
// key, where it was set, the unknown name and the known ones.
absl::Status check_registered_names(const LoadedConfig& loaded, const PluginRegistry& registry);

absl::StatusOr<LoadedConfig> load_config_file(const std::string& path,
                                              const ConfigLoadOptions& options = {});

// Loads YAML text. `source_name` names it in errors; includes and relative plugin paths are
// resolved against `base_dir`.
absl::StatusOr<LoadedConfig> load_config_text(absl::string_view yaml,
                                              const std::string& source_name,
                                              const std::string& base_dir,
                                              const ConfigLoadOptions& options = {});

// The fully resolved configuration as YAML; loading it again gives the same Config.
std::string format_config_yaml(const Config& config);

// docs/config.md: every section and key with type, default, constraints and description.
std::string config_reference_markdown();

// Every valid key path, sections included ("trainer", "trainer.lr", "rewards.functions[].name").
std::vector<std::string> all_config_key_paths();

}  // namespace flywheel::core
