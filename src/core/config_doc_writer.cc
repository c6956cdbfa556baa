#include "config_doc_writer.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "format_number.h"

namespace flywheel::core {
namespace {

std::string cell(absl::string_view text) { return absl::StrReplaceAll(text, {{"|", "\\|"}}); }

std::string code(absl::string_view text) { return absl::StrCat("`", cell(text), "`"); }

std::string quoted(const std::string& s) { return code(absl::StrCat("\"", s, "\"")); }

}  // namespace

struct ConfigDocWriter::Section {
  std::string path;
  std::string doc;
  std::vector<std::string> rows;
  std::vector<std::unique_ptr<Section>> children;
};

ConfigDocWriter::ConfigDocWriter() : root_(std::make_unique<Section>()) {
  root_->doc = "Keys outside any section.";
  open_.push_back(root_.get());
}

ConfigDocWriter::~ConfigDocWriter() = default;

void ConfigDocWriter::add_row(absl::string_view key, std::string type, std::string default_value,
                              const FieldInfo& info) {
  open_.back()->rows.push_back(absl::StrCat("| ", code(path_of(key)), " | ", type, " | ",
                                            default_value, " | ", cell(info.constraint_text()),
                                            " | ", cell(info.doc()), " |"));
}

void ConfigDocWriter::field(absl::string_view key, bool* value, const FieldInfo& info) {
  add_row(key, "bool", code(*value ? "true" : "false"), info);
}

void ConfigDocWriter::field(absl::string_view key, int64_t* value, const FieldInfo& info) {
  add_row(key, "int", code(absl::StrCat(*value)), info);
}

void ConfigDocWriter::field(absl::string_view key, double* value, const FieldInfo& info) {
  add_row(key, "float", code(format_number(*value)), info);
}

void ConfigDocWriter::field(absl::string_view key, std::string* value, const FieldInfo& info) {
  add_row(key, "string", quoted(*value), info);
}

void ConfigDocWriter::field(absl::string_view key, std::vector<std::string>* value,
                            const FieldInfo& info) {
  add_row(key, "list of strings", code(absl::StrCat("[", absl::StrJoin(*value, ", "), "]")), info);
}

void ConfigDocWriter::field(absl::string_view key, std::map<std::string, std::string>* value,
                            const FieldInfo& info) {
  add_row(key, "map of strings", code("{}"), info);
}

ConfigDocWriter::Section& ConfigDocWriter::open_section(std::string path, std::string doc) {
  auto section = std::make_unique<Section>();
  section->path = std::move(path);
  section->doc = std::move(doc);
  Section* raw = section.get();
  open_.back()->children.push_back(std::move(section));
  open_.push_back(raw);
  return *raw;
}

bool ConfigDocWriter::begin_section(absl::string_view key, absl::string_view doc) {
  open_section(path_of(key), std::string(doc));
  return PathBinder::begin_section(key, doc);
}

void ConfigDocWriter::end_section() {
  PathBinder::end_section();
  open_.pop_back();
}

void ConfigDocWriter::bind_list(absl::string_view key, absl::string_view doc,
                                const ListBinding& binding) {
  std::string path = path_of(key);
  open_.back()->rows.push_back(absl::StrCat("| ", code(path), " | list of maps | ", code("[]"),
                                            " |  | ", cell(doc), " Entries: see ",
                                            code(path + "[]"), ". |"));
  open_section(path + "[]", absl::StrCat("Keys of each entry of ", code(path), "."));
  push_prefix(path + "[]");
  binding.bind_prototype(*this);
  pop_prefix();
  open_.pop_back();
}

std::string ConfigDocWriter::markdown() const {
  std::string out;
  // Depth-first, parents before children, in schema order.
  std::function<void(const Section&)> render = [&](const Section& s) {
    if (!s.rows.empty()) {
      absl::StrAppend(&out, "## ", s.path.empty() ? "Top level" : code(s.path), "\n\n", s.doc,
                      "\n\n| key | type | default | allowed | description |\n",
                      "| --- | --- | --- | --- | --- |\n", absl::StrJoin(s.rows, "\n"), "\n\n");
    }
    for (const auto& child : s.children) render(*child);
  };
  render(*root_);
  return out;
}

}  // namespace flywheel::core
