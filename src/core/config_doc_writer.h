// Renders the configuration schema as Markdown (docs/config.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "path_binder.h"

namespace flywheel::core {

class ConfigDocWriter : public PathBinder {
 public:
  ConfigDocWriter();
  ~ConfigDocWriter() override;

  void field(absl::string_view key, bool* value, const FieldInfo& info) override;
  void field(absl::string_view key, int64_t* value, const FieldInfo& info) override;
  void field(absl::string_view key, double* value, const FieldInfo& info) override;
  void field(absl::string_view key, std::string* value, const FieldInfo& info) override;
  void field(absl::string_view key, std::vector<std::string>* value,
             const FieldInfo& info) override;
  void field(absl::string_view key, std::map<std::string, std::string>* value,
             const FieldInfo& info) override;

  // The Markdown for everything bound so far: one table per section, in schema order.
  std::string markdown() const;

 protected:
  bool begin_section(absl::string_view key, absl::string_view doc) override;
  void end_section() override;
  void bind_list(absl::string_view key, absl::string_view doc, const ListBinding& binding) override;

 private:
  struct Section;
  void add_row(absl::string_view key, std::string type, std::string default_value,
               const FieldInfo& info);
  Section& open_section(std::string path, std::string doc);

  std::unique_ptr<Section> root_;
  std::vector<Section*> open_;
};

}  // namespace flywheel::core
