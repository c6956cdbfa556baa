// Writes an options tree as YAML (the resolved config printed by validate-config).
#pragma once

#include "flywheel/core/field_binder.h"
#include "yaml-cpp/yaml.h"

namespace flywheel::core {

class YamlOptionsWriter : public FieldBinder {
 public:
  explicit YamlOptionsWriter(YAML::Emitter* out) : out_(out) {}

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
  void write_string(const std::string& value);

  YAML::Emitter* out_;
};

}  // namespace flywheel::core
