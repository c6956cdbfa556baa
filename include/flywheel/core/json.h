// A small JSON value with a strict parser and a compact writer, for the files flywheel reads and
// writes (config.json, tokenizer.json, safetensors headers, JSONL inputs and outputs).
//
// Objects keep their key order; numbers keep their exact text for integers so that int64 ids
// round-trip. Parsing errors name the line and column. Not thread-safe for concurrent mutation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flywheel::core {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Object = std::vector<std::pair<std::string, Json>>;
  using Array = std::vector<Json>;

  Json() = default;                                          // null
  Json(bool b) : type_(Type::kBool), bool_(b) {}             // NOLINT(google-explicit-constructor)
  Json(int v) : Json(static_cast<int64_t>(v)) {}             // NOLINT
  Json(int64_t v);                                           // NOLINT
  Json(double v);                                            // NOLINT
  Json(const char* s) : type_(Type::kString), string_(s) {}  // NOLINT
  Json(std::string s) : type_(Type::kString), string_(std::move(s)) {}  // NOLINT
  static Json array(Array items = {});
  static Json object(Object members = {});

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  // True for numbers written without fraction or exponent that fit int64.
  bool is_integer() const { return type_ == Type::kNumber && is_integer_; }

  bool as_bool() const { return bool_; }
  double as_double() const { return number_; }
  int64_t as_int() const { return integer_; }
  const std::string& as_string() const { return string_; }
  const Array& as_array() const { return array_; }
  Array& as_array() { return array_; }
  const Object& as_object() const { return object_; }
  Object& as_object() { return object_; }

  // Object member lookup (linear); nullptr when absent or not an object.
  const Json* find(absl::string_view key) const;
  // Appends (or replaces) a member of an object.
  Json& set(std::string key, Json value);
  // Appends to an array.
  void push_back(Json value) { array_.push_back(std::move(value)); }

  // Compact JSON ("{"a": 1}" style separators: ", " and ": " are not used; "," and ":").
  std::string dump() const;
  void dump_to(std::string* out) const;

  // Parses one JSON document (trailing whitespace allowed). InvalidArgument with
  // "line L, column C: problem" on malformed input; nesting deeper than 512 is an error, and so
  // are more than `max_values` values (bounding memory: a value takes ~100 bytes however short
  // its text; the default admits a tree of about 1 GB, far above any tokenizer.json).
  static constexpr int64_t kMaxValues = int64_t{1} << 23;
  static absl::StatusOr<Json> parse(absl::string_view text, int64_t max_values = kMaxValues);

  // A name for error messages: "null", "a boolean", "a number", "a string", "an array", ...
  static const char* type_name(Type type);

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  bool bool_ = false;
  bool is_integer_ = false;
  double number_ = 0;
  int64_t integer_ = 0;
  std::string string_;
  Array array_;
  Object object_;
};

// Appends `s` as a JSON string literal (quotes included) to `out`. Each invalid UTF-8 sequence
// is written as U+FFFD (as Rust's from_utf8_lossy does), so any input produces valid JSON.
void append_json_string(absl::string_view s, std::string* out);

}  // namespace flywheel::core
