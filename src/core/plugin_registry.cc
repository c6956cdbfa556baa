#include "flywheel/core/plugin_registry.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/core/status_macros.h"
#include "key_suggestion.h"

namespace flywheel::core {

absl::Status unknown_name_error(const std::string& kind, const std::string& name,
                                const std::vector<std::string>& known) {
  std::string message = absl::StrCat(
      "unknown ", kind, " '", name,
      "'; known: ", known.empty() ? std::string("(none)") : absl::StrJoin(known, ", "));
  if (auto suggestion = suggest_key(name, known, {})) {
    absl::StrAppend(&message, "; did you mean '", *suggestion, "'?");
  }
  return absl::NotFoundError(message);
}

PluginRegistry::PluginRegistry() = default;

// Plugin libraries are never dlclose()d: objects they created may outlive the registry.
PluginRegistry::~PluginRegistry() = default;

void PluginRegistry::kind_type_mismatch(const std::string& kind, const char* type) {
  std::fprintf(stderr, "flywheel: registry kind '%s' requested with a different type (%s)\n",
               kind.c_str(), type);
  std::abort();
}

std::vector<std::string> PluginRegistry::kinds() const {
  std::vector<std::string> out;
  for (const auto& [kind, registry] : registries_) out.push_back(kind);
  return out;
}

std::vector<std::string> PluginRegistry::names(const std::string& kind) const {
  auto it = registries_.find(kind);
  return it == registries_.end() ? std::vector<std::string>{} : it->second->names();
}

absl::Status PluginRegistry::load_plugin(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool is_path = path.find('/') != std::string::npos;
  if (is_path && !fs::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat("plugin file '", path, "' does not exist"));
  }
  std::string key = is_path ? fs::weakly_canonical(path, ec).string() : path;
  for (const std::string& loaded : loaded_keys_) {
    if (loaded == key) {
      return absl::AlreadyExistsError(absl::StrCat("plugin '", path, "' is loaded twice"));
    }
  }

  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load plugin '", path, "': ", why ? why : "unknown dlopen error"));
  }
  auto fail = [&](absl::Status status) {
    dlclose(handle);
    return status;
  };

  auto abi = reinterpret_cast<flywheel_plugin_abi_version_fn>(
      dlsym(handle, "flywheel_plugin_abi_version"));
  if (abi == nullptr) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "plugin '", path,
        "' does not export flywheel_plugin_abi_version(); add FLYWHEEL_PLUGIN_ABI() to one "
        "of its source files and rebuild it against this flywheel")));
  }
  if (int version = abi(); version != FLYWHEEL_PLUGIN_ABI_VERSION) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("plugin '", path, "' was built for plugin ABI version ", version,
                     " but this flywheel has ABI version ", FLYWHEEL_PLUGIN_ABI_VERSION,
                     "; rebuild the plugin against this flywheel's headers")));
  }
  auto entry =
      reinterpret_cast<flywheel_register_plugin_fn>(dlsym(handle, "flywheel_register_plugin"));
  if (entry == nullptr) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("plugin '", path,
                     "' has no entry point: it must define extern \"C\" void "
                     "flywheel_register_plugin(flywheel::PluginRegistry&)")));
  }

  context_.origin = absl::StrCat("plugin ", path);
  context_.errors.clear();
  std::string thrown;
  try {
    entry(*this);
  } catch (const std::exception& e) {
    thrown = e.what();
  } catch (...) {
    thrown = "unknown exception";
  }
  std::vector<std::string> errors = std::move(context_.errors);
  if (!thrown.empty()) errors.push_back(absl::StrCat("flywheel_register_plugin threw: ", thrown));
  const std::string origin = context_.origin;
  context_.origin = "built-in";
  context_.errors.clear();
  if (!errors.empty()) {
    for (auto& [kind, registry] : registries_) registry->remove_origin(origin);
    bool duplicate = false;
    for (const std::string& e : errors)
      duplicate = duplicate || e.find("already registered") != std::string::npos;
    std::string message =
        absl::StrCat("plugin '", path, "' failed to register: ", absl::StrJoin(errors, "; "));
    return fail(duplicate ? absl::AlreadyExistsError(message)
                          : absl::FailedPreconditionError(message));
  }
  loaded_paths_.push_back(path);
  loaded_keys_.push_back(key);
  return absl::OkStatus();
}

absl::Status PluginRegistry::load_plugins(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    FLYWHEEL_RETURN_IF_ERROR(load_plugin(path));
  }
  return absl::OkStatus();
}

}  // namespace flywheel::core
