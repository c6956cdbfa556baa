#include "flywheel/core/json.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "flywheel/core/utf8.h"
#include "format_number.h"

namespace flywheel::core {

Json::Json(int64_t v)
    : type_(Type::kNumber), is_integer_(true), number_(static_cast<double>(v)), integer_(v) {}

Json::Json(double v) : type_(Type::kNumber), number_(v) {
  if (v == std::trunc(v) && std::fabs(v) < 9.2e18) {
    is_integer_ = true;
    integer_ = static_cast<int64_t>(v);
  }
}

Json Json::array(Array items) {
  Json j;
  j.type_ = Type::kArray;
  j.array_ = std::move(items);
  return j;
}

Json Json::object(Object members) {
  Json j;
  j.type_ = Type::kObject;
  j.object_ = std::move(members);
  return j;
}

const Json* Json::find(absl::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [k, v] : object_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Json& Json::set(std::string key, Json value) {
  for (auto& [k, v] : object_) {
    if (k == key) {
      v = std::move(value);
      return v;
    }
  }
  object_.emplace_back(std::move(key), std::move(value));
  return object_.back().second;
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
  switch (type_) {
    case Type::kNull:
      out->append("null");
      return;
    case Type::kBool:
      out->append(bool_ ? "true" : "false");
      return;
    case Type::kNumber:
      if (is_integer_) {
        absl::StrAppend(out, integer_);
      } else if (std::isfinite(number_)) {
        out->append(format_number(number_));
      } else {
        out->append("null");  // JSON has no NaN/Infinity
      }
      return;
    case Type::kString:
      append_json_string(string_, out);
      return;
    case Type::kArray:
      out->push_back('[');
      for (size_t i = 0; i < array_.size(); ++i) {
        if (i) out->push_back(',');
        array_[i].dump_to(out);
      }
      out->push_back(']');
      return;
    case Type::kObject:
      out->push_back('{');
      for (size_t i = 0; i < object_.size(); ++i) {
        if (i) out->push_back(',');
        append_json_string(object_[i].first, out);
        out->push_back(':');
        object_[i].second.dump_to(out);
      }
      out->push_back('}');
      return;
  }
}

std::string Json::dump() const {
  std::string out;
  dump_to(&out);
  return out;
}

// Recursive-descent parser over the whole text.
class JsonParser {
 public:
  JsonParser(absl::string_view text, int64_t max_values) : text_(text), max_values_(max_values) {}

  absl::StatusOr<Json> parse_document() {
    Json value;
    if (!parse_value(&value, 0)) return error_status();
    skip_whitespace();
    if (pos_ != text_.size()) {
      fail("unexpected text after the JSON value");
      return error_status();
    }
    return value;
  }

 private:
  static constexpr int kMaxDepth = 512;

  bool fail(std::string message) {
    if (error_.empty()) {
      error_ = std::move(message);
      error_pos_ = pos_;
    }
    return false;
  }

  absl::Status error_status() const {
    int line = 1, column = 1;
    for (size_t i = 0; i < error_pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line, ", column ", column, ": ", error_));
  }

  void skip_whitespace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }

  bool consume_literal(absl::string_view literal) {
    if (text_.substr(pos_, literal.size()) != literal) return fail("invalid literal");
    pos_ += literal.size();
    return true;
  }

  bool parse_value(Json* out, int depth) {
    if (depth > kMaxDepth) return fail("nesting deeper than 512 levels");
    // A value costs ~100 bytes in memory whatever its text: bounded before it is made, so a
    // file of a few bytes per value cannot take gigabytes.
    if (++values_ > max_values_) {
      return fail(absl::StrCat("more than ", max_values_,
                               " values (each takes ~100 bytes in memory); refusing the rest"));
    }
    skip_whitespace();
    if (pos_ >= text_.size()) return fail("unexpected end of input");
    char c = text_[pos_];
    switch (c) {
      case '{':
        return parse_object(out, depth);
      case '[':
        return parse_array(out, depth);
      case '"':
        out->type_ = Json::Type::kString;
        return parse_string(&out->string_);
      case 't':
        *out = Json(true);
        return consume_literal("true");
      case 'f':
        *out = Json(false);
        return consume_literal("false");
      case 'n':
        *out = Json();
        return consume_literal("null");
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(out);
        return fail(absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
  }

  bool parse_object(Json* out, int depth) {
    out->type_ = Json::Type::kObject;
    ++pos_;  // {
    skip_whitespace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      skip_whitespace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return fail("expected a string key");
      std::string key;
      if (!parse_string(&key)) return false;
      skip_whitespace();
      if (pos_ >= text_.size() || text_[pos_] != ':') return fail("expected ':'");
      ++pos_;
      out->object_.emplace_back(std::move(key), Json());
      if (!parse_value(&out->object_.back().second, depth + 1)) return false;
      skip_whitespace();
      if (pos_ >= text_.size()) return fail("unexpected end of input in an object");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == '}') {
        ++pos_;
        return true;
      }
      return fail("expected ',' or '}'");
    }
  }

  bool parse_array(Json* out, int depth) {
    out->type_ = Json::Type::kArray;
    ++pos_;  // [
    skip_whitespace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      out->array_.emplace_back();
      if (!parse_value(&out->array_.back(), depth + 1)) return false;
      skip_whitespace();
      if (pos_ >= text_.size()) return fail("unexpected end of input in an array");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == ']') {
        ++pos_;
        return true;
      }
      return fail("expected ',' or ']'");
    }
  }

  bool parse_hex4(uint32_t* out) {
    if (pos_ + 4 > text_.size()) return fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_ + i];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= h - '0';
      } else if (h >= 'a' && h <= 'f') {
        v |= h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        v |= h - 'A' + 10;
      } else {
        return fail("invalid \\u escape");
      }
    }
    pos_ += 4;
    *out = v;
    return true;
  }

  bool parse_string(std::string* out) {
    ++pos_;  // opening quote
    while (true) {
      size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] != '"' && text_[pos_] != '\\' &&
             static_cast<unsigned char>(text_[pos_]) >= 0x20) {
        ++pos_;
      }
      out->append(text_.data() + start, pos_ - start);
      if (pos_ >= text_.size()) return fail("unterminated string");
      char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c != '\\') return fail("control character in string");
      ++pos_;
      if (pos_ >= text_.size()) return fail("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t code;
          if (!parse_hex4(&code)) return false;
          if (code >= 0xD800 && code <= 0xDBFF) {
            uint32_t low;
            if (text_.substr(pos_, 2) == "\\u") {
              pos_ += 2;
              if (!parse_hex4(&low)) return false;
              if (low >= 0xDC00 && low <= 0xDFFF) {
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
              } else {
                append_utf8(0xFFFD, out);  // lone high surrogate, then the next escape
                code = low;
              }
            } else {
              code = 0xFFFD;
            }
          }
          if (code >= 0xD800 && code <= 0xDFFF) code = 0xFFFD;  // lone surrogate
          append_utf8(code, out);
          break;
        }
        default:
          return fail("invalid escape");
      }
    }
  }

  bool parse_number(Json* out) {
    size_t start = pos_;
    bool integral = true;
    if (text_[pos_] == '-') ++pos_;
    if (pos_ >= text_.size() || !(text_[pos_] >= '0' && text_[pos_] <= '9')) {
      return fail("invalid number");
    }
    if (text_[pos_] == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' &&
        text_[pos_ + 1] <= '9') {
      return fail("leading zeros are not allowed");
    }
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (pos_ >= text_.size() || !(text_[pos_] >= '0' && text_[pos_] <= '9')) {
        return fail("invalid number");
      }
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ >= text_.size() || !(text_[pos_] >= '0' && text_[pos_] <= '9')) {
        return fail("invalid number");
      }
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    }
    std::string literal(text_.substr(start, pos_ - start));
    out->type_ = Json::Type::kNumber;
    out->number_ = std::strtod(literal.c_str(), nullptr);
    int64_t integer;
    if (integral && absl::SimpleAtoi(literal, &integer)) {
      out->is_integer_ = true;
      out->integer_ = integer;
    }
    return true;
  }

  absl::string_view text_;
  int64_t max_values_;
  int64_t values_ = 0;
  size_t pos_ = 0;
  std::string error_;
  size_t error_pos_ = 0;
};

absl::StatusOr<Json> Json::parse(absl::string_view text, int64_t max_values) {
  return JsonParser(text, max_values).parse_document();
}

}  // namespace flywheel::core
