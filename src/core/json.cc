#include "flywheel/core/json.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/core/utf8.h"
#include "format_number.h"
#include "nlohmann/json.hpp"

namespace flywheel::core {

Json::Json(int64_t v) : value_(Number{static_cast<double>(v), v, true}) {}

Json::Json(double v) {
  Number n{v, 0, false};
  if (v == std::trunc(v) && std::fabs(v) < 9.2e18) {
    n.is_integer = true;
    n.integer = static_cast<int64_t>(v);
  }
  value_ = n;
}

Json Json::array(Array items) {
  Json j;
  j.value_ = std::move(items);
  return j;
}

Json Json::object(Object members) {
  Json j;
  j.value_ = std::move(members);
  return j;
}

bool Json::is_integer() const {
  const Number* n = std::get_if<Number>(&value_);
  return n != nullptr && n->is_integer;
}

bool Json::as_bool() const {
  const bool* b = std::get_if<bool>(&value_);
  return b != nullptr && *b;
}

double Json::as_double() const {
  const Number* n = std::get_if<Number>(&value_);
  return n != nullptr ? n->value : 0;
}

int64_t Json::as_int() const {
  const Number* n = std::get_if<Number>(&value_);
  return n != nullptr ? n->integer : 0;
}

const std::string& Json::as_string() const {
  static const std::string kEmpty;
  const std::string* s = std::get_if<std::string>(&value_);
  return s != nullptr ? *s : kEmpty;
}

const Json::Array& Json::as_array() const {
  static const Array kEmpty;
  const Array* a = std::get_if<Array>(&value_);
  return a != nullptr ? *a : kEmpty;
}

const Json::Object& Json::as_object() const {
  static const Object kEmpty;
  const Object* o = std::get_if<Object>(&value_);
  return o != nullptr ? *o : kEmpty;
}

Json::Array& Json::as_array() {
  if (!is_array()) value_ = Array();
  return std::get<Array>(value_);
}

Json::Object& Json::as_object() {
  if (!is_object()) value_ = Object();
  return std::get<Object>(value_);
}

const Json* Json::find(absl::string_view key) const {
  for (const auto& [k, v] : as_object()) {
    if (k == key) return &v;
  }
  return nullptr;
}

Json& Json::set(std::string key, Json value) {
  Object& members = as_object();
  for (auto& [k, v] : members) {
    if (k == key) {
      v = std::move(value);
      return v;
    }
  }
  members.emplace_back(std::move(key), std::move(value));
  return members.back().second;
}

const char* Json::type_name(Type type) {
  switch (type) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return "a boolean";
    case Type::kNumber:
      return "a number";
    case Type::kString:
      return "a string";
    case Type::kArray:
      return "an array";
    case Type::kObject:
      return "an object";
  }
  return "?";
}

void append_json_string(absl::string_view s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t length = utf8_sequence_length(s, i);
      if (length == 0) {
        out->append("\xEF\xBF\xBD");  // U+FFFD
        i += utf8_invalid_span(s, i);
      } else {
        out->append(s.data() + i, length);
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xF]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out->push_back('"');
}

void Json::dump_to(std::string* out) const {
  switch (type()) {
    case Type::kNull:
      out->append("null");
      return;
    case Type::kBool:
      out->append(as_bool() ? "true" : "false");
      return;
    case Type::kNumber:
      if (is_integer()) {
        absl::StrAppend(out, as_int());
      } else if (std::isfinite(as_double())) {
        out->append(format_number(as_double()));
      } else {
        out->append("null");  // JSON has no NaN/Infinity
      }
      return;
    case Type::kString:
      append_json_string(as_string(), out);
      return;
    case Type::kArray: {
      const Array& items = as_array();
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out->push_back(',');
        items[i].dump_to(out);
      }
      out->push_back(']');
      return;
    }
    case Type::kObject: {
      const Object& members = as_object();
      out->push_back('{');
      for (size_t i = 0; i < members.size(); ++i) {
        if (i) out->push_back(',');
        append_json_string(members[i].first, out);
        out->push_back(':');
        members[i].second.dump_to(out);
      }
      out->push_back('}');
      return;
    }
  }
}

std::string Json::dump() const {
  std::string out;
  dump_to(&out);
  return out;
}

// Recursive-descent parser over the whole text.
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The code unit of the \uXXXX escape at text[i] (text[i] == '\\'), or -1.
int escaped_unit(absl::string_view text, size_t i) {
  if (i + 6 > text.size() || text[i + 1] != 'u') return -1;
  int v = 0;
  for (size_t k = i + 2; k < i + 6; ++k) {
    const int d = hex_digit(text[k]);
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// `text` with every lone UTF-16 surrogate escape replaced by \ufffd (same length, so error
// positions stay), or nullopt when it has none. Backslashes only occur in strings in valid JSON,
// so walking escape by escape finds them without tracking string boundaries.
std::optional<std::string> without_lone_surrogates(absl::string_view text) {
  std::optional<std::string> out;
  size_t i = 0;
  while (true) {
    const void* hit = std::memchr(text.data() + i, '\\', text.size() - i);
    if (hit == nullptr) return out;
    i = static_cast<const char*>(hit) - text.data();
    const int unit = escaped_unit(text, i);
    if (unit < 0) {
      i += 2;  // another escape (or a malformed one, which the parser reports)
      continue;
    }
    if (unit >= 0xD800 && unit <= 0xDBFF && i + 6 < text.size() && text[i + 6] == '\\') {
      const int low = escaped_unit(text, i + 6);
      if (low >= 0xDC00 && low <= 0xDFFF) {
        i += 12;  // a pair
        continue;
      }
    }
    if (unit >= 0xD800 && unit <= 0xDFFF) {
      if (!out) out.emplace(text);
      out->replace(i, 6, "\\ufffd");
    }
    i += 6;
  }
}

// A pointer into the text that records how far the parser has read (`*read`), so that errors
// raised from a SAX event (depth, value count) can name a line and column.
class TrackedChar {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackedChar(const char* p, const char** read) : p_(p), read_(read) {}
  reference operator*() const { return *p_; }
  TrackedChar& operator++() {
    *read_ = ++p_;
    return *this;
  }
  TrackedChar operator++(int) {
    TrackedChar before = *this;
    ++*this;
    return before;
  }
  bool operator==(const TrackedChar& o) const { return p_ == o.p_; }
  bool operator!=(const TrackedChar& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  const char** read_;
};

// "line L, column C" of byte `at` of `text`.
std::string line_and_column(absl::string_view text, size_t at) {
  int line = 1, column = 1;
  for (size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return absl::StrCat("line ", line, ", column ", column);
}

}  // namespace

// Builds a Json tree from nlohmann's SAX events, bounding depth and value count.
class JsonBuilder {
 public:
  using Sax = nlohmann::json;

  // `read`: how far the parser has read (TrackedChar), for the position of errors raised here.
  JsonBuilder(int64_t max_values, absl::string_view text, const char* const* read)
      : max_values_(max_values), text_(text), read_(read) {}

  bool null() { return add(Json()); }
  bool boolean(bool b) { return add(Json(b)); }
  bool number_integer(Sax::number_integer_t v) { return add(Json(static_cast<int64_t>(v))); }
  bool number_unsigned(Sax::number_unsigned_t v) {
    if (v <= static_cast<uint64_t>(INT64_MAX)) return add(Json(static_cast<int64_t>(v)));
    Json j;
    j.value_ = Json::Number{static_cast<double>(v), 0, false};
    return add(std::move(j));
  }
  bool number_float(Sax::number_float_t v, const std::string& /*text*/) {
    Json j;
    j.value_ = Json::Number{v, 0, false};
    return add(std::move(j));
  }
  bool string(std::string& s) { return add(Json(std::move(s))); }
  bool binary(Sax::binary_t& /*unused*/) { return fail("binary values are not JSON"); }
  bool start_object(std::size_t /*unknown*/) { return open(Json::object()); }
  bool key(std::string& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t /*unknown*/) { return open(Json::array()); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) {
    library_error_ = e.what();
    error_position_ = position;
    return false;
  }

  // The document, or the error at the position the parser stopped.
  absl::StatusOr<Json> finish(absl::string_view text, bool ok) {
    if (ok && error_.empty() && library_error_.empty()) return std::move(root_);
    if (!error_.empty()) return absl::InvalidArgumentError(error_);
    return absl::InvalidArgumentError(describe_library_error(text));
  }

 private:
  static constexpr size_t kMaxDepth = 512;

  bool fail(std::string message) {
    if (error_.empty()) {
      const size_t at = static_cast<size_t>(*read_ - text_.data());
      error_ = absl::StrCat(line_and_column(text_, at > 0 ? at - 1 : 0), ": ", message);
    }
    return false;
  }

  bool count() {
    if (++values_ <= max_values_) return true;
    return fail(absl::StrCat("more than ", max_values_,
                             " values (each takes 40 bytes or more in memory); refusing the rest"));
  }

  // Places `value` in the open container (or as the document), returning where it went.
  Json* place(Json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Json* top = open_.back();
    if (top->is_array()) {
      Json::Array& items = std::get<Json::Array>(top->value_);
      items.push_back(std::move(value));
      return &items.back();
    }
    Json::Object& members = std::get<Json::Object>(top->value_);
    members.emplace_back(std::move(key_), std::move(value));
    return &members.back().second;
  }

  bool add(Json value) {
    if (!count()) return false;
    place(std::move(value));
    return true;
  }

  // The element being filled is the last of its parent, which does not grow until it closes, so
  // the pointers on open_ stay valid.
  bool open(Json container) {
    if (!count()) return false;
    if (open_.size() >= kMaxDepth) return fail("nesting deeper than 512 levels");
    open_.push_back(place(std::move(container)));
    return true;
  }

  bool close() {
    open_.pop_back();
    return true;
  }

  // "line L, column C: unexpected character 'x' (nlohmann's explanation)"; the character is the
  // one the parser stopped at.
  std::string describe_library_error(absl::string_view text) const {
    const size_t at = error_position_ > 0 ? error_position_ - 1 : 0;
    std::string what;
    if (at >= text.size()) {
      what = "unexpected end of input";
    } else {
      const unsigned char c = static_cast<unsigned char>(text[at]);
      what = c < 0x20 || c >= 0x7f ? absl::StrFormat("unexpected byte 0x%02x", c)
                                   : absl::StrCat("unexpected character '", std::string(1, c), "'");
    }
    // nlohmann: "[json.exception.parse_error.101] parse error at line 1, column 4: syntax error
    // while parsing value - invalid literal; last read: 'tru'"; keep what follows " - ".
    std::string detail = library_error_;
    const size_t dash = detail.find(" - ");
    if (dash != std::string::npos) detail = detail.substr(dash + 3);
    return absl::StrCat(line_and_column(text, at), ": ", what, " (", detail, ")");
  }

  int64_t max_values_;
  absl::string_view text_;
  const char* const* read_;
  int64_t values_ = 0;
  Json root_;
  std::vector<Json*> open_;
  std::string key_;
  std::string error_;
  std::string library_error_;
  size_t error_position_ = 0;
};

absl::StatusOr<Json> Json::parse(absl::string_view text, int64_t max_values) {
  const std::optional<std::string> repaired = without_lone_surrogates(text);
  const absl::string_view input = repaired ? absl::string_view(*repaired) : text;
  const char* read = input.data();
  JsonBuilder builder(max_values, input, &read);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(TrackedChar(input.data(), &read),
                                   TrackedChar(input.data() + input.size(), &read), &builder,
                                   nlohmann::json::input_format_t::json, /*strict=*/true);
  } catch (const std::exception& e) {  // the SAX parser reports through parse_error; be safe
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", e.what()));
  }
  return builder.finish(input, ok);
}

}  // namespace flywheel::core
