// One description of every configuration field, walked by several visitors.
//
// Each options struct has exactly one `bind_options(FieldBinder&, T&)` overload (in src/core/
// options/) that names every field once, with its documentation and constraints. The YAML reader,
// the resolved-config printer, the constraint checker and the docs/config.md generator are all
// FieldBinder implementations, so they cannot drift apart.
//
// Supported field types: bool, int64_t, double, std::string, std::vector<std::string>,
// std::map<std::string, std::string> (free-form plugin parameters), closed choices (`choice`, an
// enum with a spelling table, see choice.h), nested options structs (`section`) and lists of
// options structs (`section_list`). Float fields are not supported on
// purpose: a float printed as double is noisy (0.2f -> 0.20000000298); integers are int64_t so
// that no value can be narrowed silently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"
#include "flywheel/core/choice.h"

namespace flywheel::core {

// Documentation and constraints of one field. Chainable:
//   FieldInfo("Peak learning rate.").greater_than(0)
class FieldInfo {
 public:
  explicit FieldInfo(std::string doc) : doc_(std::move(doc)) {}

  FieldInfo& min(double v);                             // value >= v
  FieldInfo& greater_than(double v);                    // value > v
  FieldInfo& max(double v);                             // value <= v
  FieldInfo& one_of(std::vector<std::string> choices);  // string in `choices`

  const std::string& doc() const { return doc_; }
  const std::vector<std::string>& choices() const { return choices_; }

  // Returns an error message ("must be >= 0, got -1") or nullopt when `v` is allowed.
  std::optional<std::string> check_number(double v) const;
  std::optional<std::string> check_string(const std::string& v) const;
  // Human-readable constraints for docs ("> 0", "one of: fifo, freshest"), empty when none.
  std::string constraint_text() const;

 private:
  std::string doc_;
  std::optional<double> min_;
  bool min_exclusive_ = false;
  std::optional<double> max_;
  std::vector<std::string> choices_;
};

// Type-erased access to a std::vector<T> of options structs, for `section_list`.
struct ListBinding {
  std::function<size_t()> size;
  std::function<void(size_t)> resize;  // drops old elements; new ones are defaults
  std::function<void(class FieldBinder&, size_t)> bind_element;
  std::function<void(class FieldBinder&)> bind_prototype;  // binds a default-constructed T
};

// Visitor over the fields of an options struct. Implementations are single-use and not
// thread-safe.
class FieldBinder {
 public:
  virtual ~FieldBinder() = default;

  virtual void field(absl::string_view key, bool* value, const FieldInfo& info) = 0;
  virtual void field(absl::string_view key, int64_t* value, const FieldInfo& info) = 0;
  virtual void field(absl::string_view key, double* value, const FieldInfo& info) = 0;
  virtual void field(absl::string_view key, std::string* value, const FieldInfo& info) = 0;
  virtual void field(absl::string_view key, std::vector<std::string>* value,
                     const FieldInfo& info) = 0;
  virtual void field(absl::string_view key, std::map<std::string, std::string>* value,
                     const FieldInfo& info) = 0;

  // A closed choice: an enum read and written as its spelling (choice.h). `allowed` narrows the
  // table for this field (empty: every value); a spelling outside it is rejected like any
  // other out-of-range value. Visitors see a string field with one_of(spellings).
  template <typename E>
  void choice(absl::string_view key, E* value, FieldInfo info, std::vector<E> allowed = {}) {
    std::vector<std::string> spellings;
    for (const ChoiceName<E>& c : choice_names(E{})) {
      bool ok = allowed.empty();
      for (E a : allowed) ok = ok || a == c.value;
      if (ok) spellings.emplace_back(c.name);
    }
    info.one_of(std::move(spellings));
    std::string name(choice_name(*value));
    field(key, &name, info);
    if (std::optional<E> parsed = parse_choice<E>(name)) *value = *parsed;
  }

  // A nested options struct; `bind_options(FieldBinder&, T&)` must exist for T.
  template <typename T>
  void section(absl::string_view key, T* value, absl::string_view doc) {
    if (begin_section(key, doc)) {
      bind_options(*this, *value);
    }
    end_section();
  }

  // A list of options structs (YAML sequence of maps). Lists replace, never merge.
  template <typename T>
  void section_list(absl::string_view key, std::vector<T>* values, absl::string_view doc) {
    ListBinding binding;
    binding.size = [values] { return values->size(); };
    binding.resize = [values](size_t n) {
      values->clear();
      values->resize(n);
    };
    binding.bind_element = [values](FieldBinder& b, size_t i) { bind_options(b, (*values)[i]); };
    binding.bind_prototype = [](FieldBinder& b) {
      T prototype;
      bind_options(b, prototype);
    };
    bind_list(key, doc, binding);
  }

 protected:
  // Enters a section. Returns false when its fields need not be visited (e.g. absent in YAML);
  // end_section() is called either way.
  virtual bool begin_section(absl::string_view key, absl::string_view doc) = 0;
  virtual void end_section() = 0;
  virtual void bind_list(absl::string_view key, absl::string_view doc,
                         const ListBinding& binding) = 0;
};

// Joins a key path: join_key_path("trainer", "lr") == "trainer.lr"; an empty prefix gives `key`.
std::string join_key_path(absl::string_view prefix, absl::string_view key);

}  // namespace flywheel::core
