// Base for FieldBinders that walk in-memory values and need the current key path.
#pragma once

#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "flywheel/core/field_binder.h"

namespace flywheel::core {

class PathBinder : public FieldBinder {
 protected:
  // Full path of `key` inside the current section.
  std::string path_of(absl::string_view key) const { return join_key_path(prefix(), key); }
  const std::string& prefix() const {
    static const std::string kEmpty;
    return prefixes_.empty() ? kEmpty : prefixes_.back();
  }
  void push_prefix(std::string full_path) { prefixes_.push_back(std::move(full_path)); }
  void pop_prefix() { prefixes_.pop_back(); }

  bool begin_section(absl::string_view key, absl::string_view doc) override {
    push_prefix(path_of(key));
    return true;
  }
  void end_section() override { pop_prefix(); }

  // Binds every element of a list under "key[i]".
  void bind_elements(absl::string_view key, const ListBinding& binding) {
    std::string base = path_of(key);
    for (size_t i = 0; i < binding.size(); ++i) {
      push_prefix(base + "[" + std::to_string(i) + "]");
      binding.bind_element(*this, i);
      pop_prefix();
    }
  }

 private:
  std::vector<std::string> prefixes_;
};

}  // namespace flywheel::core
