// A small JSON value with a strict parser and a compact writer, for the files flywheel reads and
// writes (config.json, tokenizer.json, safetensors headers, JSONL inputs and outputs).
//
// Parsing is nlohmann-json's lexer and parser (Debian's nlohmann-json3, fuzzed upstream for
// years) feeding this tree through its SAX interface; nothing outside json.cc sees that library.
// Objects keep their key order; integers that fit int64 are kept exactly, so int64 ids
// round-trip. Parsing errors name the line and column. Not thread-safe for concurrent mutation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flywheel::core {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Object = std::vector<std::pair<std::string, Json>>;
  using Array = std::vector<Json>;

  Json() = default;                                // null
  Json(bool b) : value_(b) {}                      // NOLINT(google-explicit-constructor)
  Json(int v) : Json(static_cast<int64_t>(v)) {}   // NOLINT
  Json(int64_t v);                                 // NOLINT
  Json(double v);                                  // NOLINT
  Json(const char* s) : value_(std::string(s)) {}  // NOLINT
  Json(std::string s) : value_(std::move(s)) {}    // NOLINT
  static Json array(Array items = {});
  static Json object(Object members = {});

  Type type() const { return static_cast<Type>(value_.index()); }
  bool is_null() const { return type() == Type::kNull; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_number() const { return type() == Type::kNumber; }
  bool is_string() const { return type() == Type::kString; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_object() const { return type() == Type::kObject; }
  // True for numbers written without fraction or exponent that fit int64.
  bool is_integer() const;

  // The value, or false / 0 / "" / empty for a value of another type.
  bool as_bool() const;
  double as_double() const;
  int64_t as_int() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  const Object& as_object() const;
  // Mutable access; a value of another type becomes an empty array / object first.
  Array& as_array();
  Object& as_object();

  // Object member lookup (linear); nullptr when absent or not an object.
  const Json* find(absl::string_view key) const;
  // Appends (or replaces) a member of an object (a non-object becomes an empty object first).
  Json& set(std::string key, Json value);
  // Appends to an array (a non-array becomes an empty array first).
  void push_back(Json value) { as_array().push_back(std::move(value)); }

  // Compact JSON ("{"a": 1}" style separators: ", " and ": " are not used; "," and ":").
  std::string dump() const;
  void dump_to(std::string* out) const;

  // Parses one JSON document (trailing whitespace allowed). InvalidArgument with
  // "line L, column C: problem" on malformed input; nesting deeper than 512 is an error, and so
  // are more than `max_values` values (bounding memory: a value takes 40 bytes however short
  // its text, plus its string's or container's heap; the default admits a tree of about
  // 0.5 GB, far above any tokenizer.json). A lone UTF-16 surrogate escape (\ud800 without its
  // pair, as Python's json.dumps writes for broken text) becomes U+FFFD instead of an error.
  static constexpr int64_t kMaxValues = int64_t{1} << 23;
  static absl::StatusOr<Json> parse(absl::string_view text, int64_t max_values = kMaxValues);

  // A name for error messages: "null", "a boolean", "a number", "a string", "an array", ...
  static const char* type_name(Type type);

 private:
  friend class JsonBuilder;
  struct Number {
    double value = 0;
    int64_t integer = 0;
    bool is_integer = false;
  };
  // In Type's order: index() is the type.
  std::variant<std::monostate, bool, Number, std::string, Array, Object> value_;
};

// Appends `s` as a JSON string literal (quotes included) to `out`. Each invalid UTF-8 sequence
// is written as U+FFFD (as Rust's from_utf8_lossy does), so any input produces valid JSON.
void append_json_string(absl::string_view s, std::string* out);

}  // namespace flywheel::core
