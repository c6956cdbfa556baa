#include "yaml_options_writer.h"

#include "absl/strings/numbers.h"
#include "format_number.h"

namespace flywheel::core {
namespace {

// Strings a YAML reader would take for another type are quoted.
bool needs_quotes(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return true;
  if (s == "true" || s == "false" || s == "True" || s == "False" || s == "yes" || s == "no") {
    return true;
  }
  double d;
  return absl::SimpleAtod(s, &d);
}

}  // namespace

void YamlOptionsWriter::write_string(const std::string& value) {
  if (needs_quotes(value)) {
    *out_ << YAML::DoubleQuoted << value;
  } else {
    *out_ << value;
  }
}

void YamlOptionsWriter::field(absl::string_view key, bool* value, const FieldInfo& info) {
  *out_ << YAML::Key << std::string(key) << YAML::Value << (*value ? "true" : "false");
}

void YamlOptionsWriter::field(absl::string_view key, int64_t* value, const FieldInfo& info) {
  *out_ << YAML::Key << std::string(key) << YAML::Value << *value;
}

void YamlOptionsWriter::field(absl::string_view key, double* value, const FieldInfo& info) {
  *out_ << YAML::Key << std::string(key) << YAML::Value << format_number(*value);
}

void YamlOptionsWriter::field(absl::string_view key, std::string* value, const FieldInfo& info) {
  *out_ << YAML::Key << std::string(key) << YAML::Value;
  write_string(*value);
}

void YamlOptionsWriter::field(absl::string_view key, std::vector<std::string>* value,
                              const FieldInfo& info) {
  *out_ << YAML::Key << std::string(key) << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const std::string& item : *value) write_string(item);
  *out_ << YAML::EndSeq;
}

void YamlOptionsWriter::field(absl::string_view key, std::map<std::string, std::string>* value,
                              const FieldInfo& info) {
  *out_ << YAML::Key << std::string(key) << YAML::Value << YAML::Flow << YAML::BeginMap;
  for (const auto& [k, v] : *value) {
    *out_ << YAML::Key << k << YAML::Value;
    write_string(v);
  }
  *out_ << YAML::EndMap;
}

bool YamlOptionsWriter::begin_section(absl::string_view key, absl::string_view doc) {
  *out_ << YAML::Key << std::string(key) << YAML::Value << YAML::BeginMap;
  return true;
}

void YamlOptionsWriter::end_section() { *out_ << YAML::EndMap; }

void YamlOptionsWriter::bind_list(absl::string_view key, absl::string_view doc,
                                  const ListBinding& binding) {
  *out_ << YAML::Key << std::string(key) << YAML::Value << YAML::BeginSeq;
  for (size_t i = 0; i < binding.size(); ++i) {
    *out_ << YAML::BeginMap;
    binding.bind_element(*this, i);
    *out_ << YAML::EndMap;
  }
  *out_ << YAML::EndSeq;
}

}  // namespace flywheel::core
