// Checks every field of an options tree against its FieldInfo constraints.
#pragma once

#include <vector>

#include "flywheel/core/config.h"
#include "path_binder.h"

namespace flywheel::core {

class ConstraintChecker : public PathBinder {
 public:
  void field(absl::string_view key, bool* value, const FieldInfo& info) override {}
  void field(absl::string_view key, int64_t* value, const FieldInfo& info) override {
    check(key, info.check_number(static_cast<double>(*value)));
  }
  void field(absl::string_view key, double* value, const FieldInfo& info) override {
    check(key, info.check_number(*value));
  }
  void field(absl::string_view key, std::string* value, const FieldInfo& info) override {
    check(key, info.check_string(*value));
  }
  void field(absl::string_view key, std::vector<std::string>* value,
             const FieldInfo& info) override {}
  void field(absl::string_view key, std::map<std::string, std::string>* value,
             const FieldInfo& info) override {}

  const std::vector<ConfigIssue>& issues() const { return issues_; }

 protected:
  void bind_list(absl::string_view key, absl::string_view doc,
                 const ListBinding& binding) override {
    bind_elements(key, binding);
  }

 private:
  void check(absl::string_view key, const std::optional<std::string>& problem) {
    if (problem) issues_.push_back({path_of(key), *problem});
  }

  std::vector<ConfigIssue> issues_;
};

}  // namespace flywheel::core
