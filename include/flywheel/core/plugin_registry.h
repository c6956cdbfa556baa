// The set of all registries, and loading of plugin shared libraries.
//
// A plugin is a shared library that defines, in one source file:
//
//   #include "flywheel/core/plugin_registry.h"
//   FLYWHEEL_PLUGIN_ABI();  // exports flywheel_plugin_abi_version()
//   extern "C" void flywheel_register_plugin(flywheel::PluginRegistry& registry) {
//     registry.get<flywheel::core::MetricsSink, const flywheel::core::MetricsSinkOptions&>()
//         .add("csv", &CsvSink::create);
//   }
//
// and is listed under `plugins:` in the config. Loaded plugins stay loaded until the process
// exits (objects they created may outlive any registry).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/registry.h"

// Bumped whenever a change to a public header breaks plugins built against the previous one.
#define FLYWHEEL_PLUGIN_ABI_VERSION 2  // 2: issue 27 moved headers; rewards::ParamReader

namespace flywheel::core {

class PluginRegistry {
 public:
  PluginRegistry();
  ~PluginRegistry();
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  // The registry of `Base` objects built from `Args`, created on first use. Base names its kind
  // with `static constexpr char kRegistryKind[]` (e.g. "metrics_sink"). Two different types
  // claiming one kind is a programming error and aborts.
  template <typename Base, typename... Args>
  Registry<Base, Args...>& get() {
    using R = Registry<Base, Args...>;
    const std::string kind = Base::kRegistryKind;
    auto it = registries_.find(kind);
    if (it == registries_.end()) {
      it = registries_.emplace(kind, std::make_unique<R>(kind, &context_)).first;
    }
    auto* typed = dynamic_cast<R*>(it->second.get());
    if (typed == nullptr) kind_type_mismatch(kind, typeid(R).name());
    return *typed;
  }

  // Names of the registered kinds ("metrics_sink", ...), sorted.
  std::vector<std::string> kinds() const;
  // Entries of one kind; empty for an unknown kind.
  std::vector<std::string> names(const std::string& kind) const;

  // dlopen()s `path`, checks flywheel_plugin_abi_version() and calls
  // flywheel_register_plugin(*this). Errors (all with the path): NotFound for a missing file,
  // FailedPrecondition for a library that cannot be loaded, has no entry point or a different
  // ABI version, AlreadyExists for a duplicate name or a plugin loaded twice. On error nothing
  // of the plugin stays registered.
  absl::Status load_plugin(const std::string& path);
  // Loads each path in order; stops at the first error.
  absl::Status load_plugins(const std::vector<std::string>& paths);
  // Paths of the plugins loaded so far, in order.
  const std::vector<std::string>& loaded_plugins() const { return loaded_paths_; }

 private:
  [[noreturn]] static void kind_type_mismatch(const std::string& kind, const char* type);

  RegistrationContext context_;
  std::map<std::string, std::unique_ptr<RegistryBase>> registries_;
  std::vector<std::string> loaded_paths_;
  std::vector<std::string> loaded_keys_;  // canonical paths, to refuse loading twice
};

}  // namespace flywheel::core

namespace flywheel {
using core::PluginRegistry;
}  // namespace flywheel

// Entry point signature every plugin exports.
extern "C" {
typedef void (*flywheel_register_plugin_fn)(flywheel::PluginRegistry&);
typedef int (*flywheel_plugin_abi_version_fn)();
}

// Defines flywheel_plugin_abi_version() in a plugin; use once per plugin library.
#define FLYWHEEL_PLUGIN_ABI()                                                           \
  extern "C" __attribute__((visibility("default"))) int flywheel_plugin_abi_version() { \
    return FLYWHEEL_PLUGIN_ABI_VERSION;                                                 \
  }
