// Name -> factory registries for every extensible kind (DESIGN.md §5).
//
// Built-ins are added from one explicit list per component (e.g. register_core_builtins());
// plugins add theirs from flywheel_register_plugin(). Configs then select entries by name.
// Thread-safe: add() and create() may be called concurrently.
#pragma once

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace flywheel::core {

// Shared by the registries of one PluginRegistry: who is registering right now ("built-in" or a
// plugin path) and the errors registrations produced (a plugin may ignore add()'s Status).
struct RegistrationContext {
  std::string origin = "built-in";
  std::vector<std::string> errors;
};

// The kind-independent part of a registry.
class RegistryBase {
 public:
  virtual ~RegistryBase() = default;
  const std::string& kind() const { return kind_; }
  virtual std::vector<std::string> names() const = 0;
  // Removes every entry added with `origin` (used to roll back a plugin that failed to load).
  virtual void remove_origin(const std::string& origin) = 0;

 protected:
  RegistryBase(std::string kind, RegistrationContext* context)
      : kind_(std::move(kind)), context_(context) {}

  std::string current_origin() const { return context_ ? context_->origin : "built-in"; }
  void record_error(const std::string& error) const {
    if (context_) context_->errors.push_back(error);
  }

 private:
  std::string kind_;
  RegistrationContext* context_;  // not owned; may be null
};

// "unknown metrics_sink 'cvs'; known: console, csv, jsonl; did you mean 'csv'?"
absl::Status unknown_name_error(const std::string& kind, const std::string& name,
                                const std::vector<std::string>& known);

template <typename Base, typename... Args>
class Registry : public RegistryBase {
 public:
  using Factory = std::function<absl::StatusOr<std::unique_ptr<Base>>(Args...)>;

  explicit Registry(std::string kind, RegistrationContext* context = nullptr)
      : RegistryBase(std::move(kind), context) {}

  // Adds `factory` under `name`. AlreadyExists when the name is taken (by anyone).
  absl::Status add(const std::string& name, Factory factory) {
    absl::MutexLock lock(&mu_);
    std::string origin = current_origin();
    if (name.empty()) {
      std::string error = absl::StrCat(kind(), " registered with an empty name (by ", origin, ")");
      record_error(error);
      return absl::InvalidArgumentError(error);
    }
    auto [it, inserted] = entries_.try_emplace(name, Entry{std::move(factory), origin});
    if (!inserted) {
      std::string error =
          absl::StrCat(kind(), " '", name, "' is already registered (by ", it->second.origin, "); ",
                       origin, " cannot register it again");
      record_error(error);
      return absl::AlreadyExistsError(error);
    }
    return absl::OkStatus();
  }

  bool contains(const std::string& name) const {
    absl::MutexLock lock(&mu_);
    return entries_.count(name) > 0;
  }

  // Builds the entry `name`. NotFound (listing the known names) for an unknown name; a factory
  // that throws becomes Internal.
  absl::StatusOr<std::unique_ptr<Base>> create(const std::string& name, Args... args) const {
    Factory factory;
    {
      absl::MutexLock lock(&mu_);
      auto it = entries_.find(name);
      if (it == entries_.end()) return unknown_name_error(kind(), name, names_locked());
      factory = it->second.factory;
    }
    try {
      return factory(std::forward<Args>(args)...);
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("factory of ", kind(), " '", name, "' threw: ", e.what()));
    }
  }

  std::vector<std::string> names() const override {
    absl::MutexLock lock(&mu_);
    return names_locked();
  }

  void remove_origin(const std::string& origin) override {
    absl::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.origin == origin ? entries_.erase(it) : std::next(it);
    }
  }

 private:
  struct Entry {
    Factory factory;
    std::string origin;
  };

  std::vector<std::string> names_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::string> out;
    for (const auto& [name, entry] : entries_) out.push_back(name);
    return out;
  }

  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::core
