#include "flywheel/core/field_binder.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "format_number.h"

namespace flywheel::core {

FieldInfo& FieldInfo::min(double v) {
  min_ = v;
  min_exclusive_ = false;
  return *this;
}

FieldInfo& FieldInfo::greater_than(double v) {
  min_ = v;
  min_exclusive_ = true;
  return *this;
}

FieldInfo& FieldInfo::max(double v) {
  max_ = v;
  return *this;
}

FieldInfo& FieldInfo::one_of(std::vector<std::string> choices) {
  choices_ = std::move(choices);
  return *this;
}

std::optional<std::string> FieldInfo::check_number(double v) const {
  if (min_) {
    if (min_exclusive_ && !(v > *min_)) {
      return absl::StrCat("must be > ", format_number(*min_), ", got ", format_number(v));
    }
    if (!min_exclusive_ && !(v >= *min_)) {
      return absl::StrCat("must be >= ", format_number(*min_), ", got ", format_number(v));
    }
  }
  if (max_ && !(v <= *max_)) {
    return absl::StrCat("must be <= ", format_number(*max_), ", got ", format_number(v));
  }
  return std::nullopt;
}

std::optional<std::string> FieldInfo::check_string(const std::string& v) const {
  if (choices_.empty()) return std::nullopt;
  for (const std::string& c : choices_) {
    if (c == v) return std::nullopt;
  }
  return absl::StrCat("must be one of: ", absl::StrJoin(choices_, ", "), "; got '", v, "'");
}

std::string FieldInfo::constraint_text() const {
  std::vector<std::string> parts;
  if (min_) parts.push_back(absl::StrCat(min_exclusive_ ? "> " : ">= ", format_number(*min_)));
  if (max_) parts.push_back(absl::StrCat("<= ", format_number(*max_)));
  if (!choices_.empty()) parts.push_back(absl::StrCat("one of: ", absl::StrJoin(choices_, ", ")));
  return absl::StrJoin(parts, ", ");
}

std::string join_key_path(absl::string_view prefix, absl::string_view key) {
  if (prefix.empty()) return std::string(key);
  return absl::StrCat(prefix, ".", key);
}

}  // namespace flywheel::core
