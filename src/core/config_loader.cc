#include "flywheel/core/config_loader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "config_doc_writer.h"
#include "config_error.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/plugin_registry.h"
#include "path_binder.h"
#include "yaml_options_reader.h"
#include "yaml_options_writer.h"

namespace flywheel::core {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxConfigBytes = 16 << 20;

// Collects every key path of the schema.
class KeyPathCollector : public PathBinder {
 public:
  void field(absl::string_view key, bool*, const FieldInfo&) override { add(key); }
  void field(absl::string_view key, int64_t*, const FieldInfo&) override { add(key); }
  void field(absl::string_view key, double*, const FieldInfo&) override { add(key); }
  void field(absl::string_view key, std::string*, const FieldInfo&) override { add(key); }
  void field(absl::string_view key, std::vector<std::string>*, const FieldInfo&) override {
    add(key);
  }
  void field(absl::string_view key, std::map<std::string, std::string>*,
             const FieldInfo&) override {
    add(key);
  }
  std::vector<std::string> paths;

 protected:
  bool begin_section(absl::string_view key, absl::string_view doc) override {
    add(key);
    return PathBinder::begin_section(key, doc);
  }
  void bind_list(absl::string_view key, absl::string_view doc,
                 const ListBinding& binding) override {
    add(key);
    push_prefix(path_of(key) + "[]");
    binding.bind_prototype(*this);
    pop_prefix();
  }

 private:
  void add(absl::string_view key) { paths.push_back(path_of(key)); }
};

// Applies configuration layers in order and gathers every error.
class LayeredLoader {
 public:
  explicit LayeredLoader(const ConfigLoadOptions& options)
      : options_(options), all_paths_(all_config_key_paths()) {}

  void apply_file(const std::string& path, const SourceLocation& included_from, int depth);
  void apply_text(absl::string_view text, const std::string& source, const std::string& base_dir,
                  int depth);
  void apply_override(const std::string& assignment);
  absl::StatusOr<LoadedConfig> finish(const std::string& main_source);

 private:
  void apply_document(const YAML::Node& root, const std::string& source,
                      const std::string& base_dir, bool from_file);
  void apply_includes(const YAML::Node& root, const std::string& source,
                      const std::string& base_dir, int depth);
  SourceLocation location_for(const std::string& path, const std::string& fallback) const;

  const ConfigLoadOptions& options_;
  std::vector<std::string> all_paths_;
  LoadedConfig result_;
  std::vector<ConfigError> errors_;
  std::map<std::string, SourceLocation> set_locations_;
  std::vector<std::string> include_stack_;  // canonical paths, for cycle detection
};

SourceLocation mark_location(const std::string& source, const YAML::Mark& mark) {
  SourceLocation where{source};
  if (mark.line >= 0) {
    where.line = mark.line + 1;
    where.column = mark.column + 1;
  }
  return where;
}

void LayeredLoader::apply_file(const std::string& path, const SourceLocation& included_from,
                               int depth) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(path, ec);
  std::string key = ec ? path : canonical.string();
  for (const std::string& open : include_stack_) {
    if (open == key) {
      errors_.push_back(
          {included_from, "include",
           absl::StrCat("include cycle: ", absl::StrJoin(include_stack_, " -> "), " -> ", key)});
      return;
    }
  }
  if (depth > options_.max_include_depth) {
    errors_.push_back({included_from, "include",
                       absl::StrCat("includes nested deeper than ", options_.max_include_depth)});
    return;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in || fs::is_directory(path, ec)) {
    errors_.push_back(
        {included_from, included_from.source.empty() ? "" : "include",
         absl::StrCat("cannot read config file '", path,
                      "': ", fs::exists(path, ec) ? "not a readable file" : "no such file")});
    return;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > kMaxConfigBytes) {
    errors_.push_back(
        {{path}, "", absl::StrCat("config file larger than ", kMaxConfigBytes, " bytes")});
    return;
  }
  include_stack_.push_back(key);
  apply_text(text.str(), path, fs::path(path).parent_path().string(), depth);
  include_stack_.pop_back();
  result_.files.push_back(path);  // after its includes: `files` lists the application order
}

void LayeredLoader::apply_text(absl::string_view text, const std::string& source,
                               const std::string& base_dir, int depth) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    errors_.push_back(
        {mark_location(source, e.mark), "", absl::StrCat("YAML syntax error: ", e.msg)});
    return;
  }
  if (root.IsMap()) apply_includes(root, source, base_dir, depth);
  apply_document(root, source, base_dir, /*from_file=*/true);
}

void LayeredLoader::apply_includes(const YAML::Node& root, const std::string& source,
                                   const std::string& base_dir, int depth) {
  YAML::Node include;
  for (const auto& entry : root) {
    if (entry.first.IsScalar() && entry.first.Scalar() == "include") include = entry.second;
  }
  if (!include.IsDefined() || include.IsNull()) return;
  std::vector<YAML::Node> items;
  if (include.IsScalar()) {
    items.push_back(include);
  } else if (include.IsSequence()) {
    for (const auto& item : include) items.push_back(item);
  }
  if (items.empty() && !include.IsSequence()) {
    errors_.push_back({mark_location(source, include.Mark()), "include",
                       "expected a file path or a list of file paths"});
    return;
  }
  for (const YAML::Node& item : items) {
    SourceLocation where = mark_location(source, item.Mark());
    if (!item.IsScalar() || item.Scalar().empty()) {
      errors_.push_back({where, "include", "expected a file path"});
      continue;
    }
    fs::path target(item.Scalar());
    if (target.is_relative()) target = fs::path(base_dir) / target;
    apply_file(target.lexically_normal().string(), where, depth + 1);
  }
}

void LayeredLoader::apply_document(const YAML::Node& root, const std::string& source,
                                   const std::string& base_dir, bool from_file) {
  YamlOptionsReader::Context context;
  context.source = source;
  context.has_positions = from_file;  // an override's YAML marks point into its value
  // `include:` is a file-level key; an override cannot include files.
  if (from_file) context.root_keys_handled_elsewhere = {"include"};
  context.all_paths = &all_paths_;
  context.errors = &errors_;
  context.set_locations = &set_locations_;
  std::vector<std::string> plugins_before = result_.config.plugins;
  YamlOptionsReader reader(std::move(context), root);
  reader.read(result_.config);
  // Plugin paths are relative to the file that names them.
  if (result_.config.plugins != plugins_before && !base_dir.empty()) {
    for (std::string& plugin : result_.config.plugins) {
      fs::path p(plugin);
      if (!plugin.empty() && p.is_relative() && plugin.find('/') != std::string::npos) {
        plugin = (fs::path(base_dir) / p).lexically_normal().string();
      }
    }
  }
}

YAML::Node nest(const std::vector<std::string>& parts, size_t i, const YAML::Node& leaf) {
  if (i == parts.size()) return leaf;
  YAML::Node map(YAML::NodeType::Map);
  map[parts[i]] = nest(parts, i + 1, leaf);
  return map;
}

void LayeredLoader::apply_override(const std::string& assignment) {
  std::string source = absl::StrCat("--set ", assignment);
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    errors_.push_back({{source}, "", "expected KEY=VALUE, e.g. --set trainer.lr=1e-5"});
    return;
  }
  std::string key = assignment.substr(0, eq);
  std::vector<std::string> parts = absl::StrSplit(key, '.');
  for (const std::string& part : parts) {
    if (part.empty()) {
      errors_.push_back({{source}, key, "empty component in key path"});
      return;
    }
  }
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    errors_.push_back({{source}, key, absl::StrCat("value is not valid YAML: ", e.msg)});
    return;
  }
  apply_document(nest(parts, 0, value), source, "", /*from_file=*/false);
}

SourceLocation LayeredLoader::location_for(const std::string& path,
                                           const std::string& fallback) const {
  // The key itself, else the closest enclosing key that was written, else the main file.
  std::string candidate = path;
  while (!candidate.empty()) {
    auto it = set_locations_.find(candidate);
    if (it != set_locations_.end()) return it->second;
    size_t cut = candidate.find_last_of(".[");
    candidate = cut == std::string::npos ? "" : candidate.substr(0, cut);
  }
  return SourceLocation{fallback};
}

absl::StatusOr<LoadedConfig> LayeredLoader::finish(const std::string& main_source) {
  if (errors_.empty()) {
    for (const ConfigIssue& issue : collect_config_issues(result_.config)) {
      errors_.push_back({location_for(issue.path, main_source), issue.path, issue.message});
    }
  }
  if (!errors_.empty()) {
    std::vector<std::string> lines;
    for (const ConfigError& e : errors_) lines.push_back(e.to_string());
    return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
  }
  for (const auto& [path, where] : set_locations_) {
    result_.origins[path] = where.to_string();
  }
  return std::move(result_);
}

}  // namespace

absl::StatusOr<LoadedConfig> load_config_file(const std::string& path,
                                              const ConfigLoadOptions& options) {
  LayeredLoader loader(options);
  loader.apply_file(path, SourceLocation{}, /*depth=*/0);
  for (const std::string& assignment : options.overrides) loader.apply_override(assignment);
  return loader.finish(path);
}

absl::StatusOr<LoadedConfig> load_config_text(absl::string_view yaml,
                                              const std::string& source_name,
                                              const std::string& base_dir,
                                              const ConfigLoadOptions& options) {
  LayeredLoader loader(options);
  loader.apply_text(yaml, source_name, base_dir, /*depth=*/0);
  for (const std::string& assignment : options.overrides) loader.apply_override(assignment);
  return loader.finish(source_name);
}

std::string format_config_yaml(const Config& config) {
  Config copy = config;
  YAML::Emitter out;
  out << YAML::BeginMap;
  YamlOptionsWriter writer(&out);
  bind_options(writer, copy);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string config_reference_markdown() {
  Config defaults;
  ConfigDocWriter writer;
  bind_options(writer, defaults);
  return absl::StrCat(
      "# Configuration reference\n\n"
      "<!-- Generated by `flywheel config-doc --output docs/config.md`; do not edit by hand. "
      "A test fails when this file and the schema disagree. -->\n\n"
      "A flywheel job is one YAML file. Every key below has a default, so a file names only "
      "what it changes. Loading is strict: an unknown key (with a suggestion for typos), a "
      "value of the wrong type or out of range, and a broken cross-field rule are errors "
      "reported as `file:line:column: key.path: problem` before anything starts "
      "(`flywheel validate-config FILE` checks a file and prints the resolved config; exit "
      "code 2 on errors).\n\n"
      "- `include: base.yaml` (or a list) at the top of a file applies other files first, "
      "relative to the including file; the including file's keys win. Sections merge key by "
      "key; lists are replaced whole.\n"
      "- `--set key.path=value` (repeatable) overrides any key after all files; the value is "
      "YAML (`--set rollout.stop='[\"\\n\\n\"]'`) and is validated like a file's.\n"
      "- A section present in the schema is not a promise that its component exists yet: "
      "`flywheel <subcommand> --help` lists what is implemented.\n\n",
      writer.markdown());
}

absl::Status check_registered_names(const LoadedConfig& loaded, const PluginRegistry& registry) {
  std::vector<std::string> problems;
  auto check = [&](const std::string& path, const std::string& kind, const std::string& name) {
    std::vector<std::string> known = registry.names(kind);
    if (std::find(known.begin(), known.end(), name) != known.end()) return;
    auto origin = loaded.origins.find(path);
    std::string where = origin == loaded.origins.end() ? "(default)" : origin->second;
    problems.push_back(
        absl::StrCat(where, ": ", path, ": ", unknown_name_error(kind, name, known).message()));
  };
  for (size_t i = 0; i < loaded.config.logging.sinks.size(); ++i) {
    check("logging.sinks", MetricsSink::kRegistryKind, loaded.config.logging.sinks[i]);
  }
  // Components of other libraries, by kind name (core does not link them). A name left empty
  // means "the preset's"; an unregistered kind (component not linked) is not checked.
  const AlgorithmOptions& a = loaded.config.algorithm;
  const std::pair<const char*, std::pair<const char*, const std::string*>> components[] = {
      {"algorithm.advantage_estimator", {"advantage_estimator", &a.advantage_estimator}},
      {"algorithm.policy_loss", {"policy_loss", &a.policy_loss}},
      {"algorithm.is_correction", {"is_correction", &a.is_correction}},
      {"buffer.filter", {"group_filter", &loaded.config.buffer.filter}},
      {"environment.name", {"environment", &loaded.config.environment.name}}};
  for (const auto& [path, kind_and_name] : components) {
    const auto& [kind, name] = kind_and_name;
    if (name->empty() || registry.names(kind).empty()) continue;
    check(path, kind, *name);
  }
  if (!registry.names("reward").empty()) {
    const std::vector<RewardFunctionOptions>& functions = loaded.config.rewards.functions;
    for (size_t i = 0; i < functions.size(); ++i) {
      check(absl::StrCat("rewards.functions[", i, "].name"), "reward", functions[i].name);
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
}

std::vector<std::string> all_config_key_paths() {
  Config defaults;
  KeyPathCollector collector;
  bind_options(collector, defaults);
  return collector.paths;
}

}  // namespace flywheel::core
