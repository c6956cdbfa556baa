#include "sandbox/python_tests.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::rewards {
namespace {

// A token of Python source at bracket depth 0 outside strings and comments: an operator or a
// keyword, with its position.
struct TopToken {
  std::string text;
  size_t begin = 0, end = 0;
};

bool is_word_char(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// Scans `s`, calling `on_top` for each top-level operator / keyword / comma and tracking the
// bracket depth. False when a string is unterminated or brackets do not balance.
template <typename OnTop>
bool scan(absl::string_view s, OnTop on_top) {
  int depth = 0;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    if (c == '\'' || c == '"') {
      const bool triple = s.substr(i, 3) == std::string(3, c);
      const std::string close = triple ? std::string(3, c) : std::string(1, c);
      i += close.size();
      while (i < s.size() && s.substr(i, close.size()) != close) {
        if (!triple && s[i] == '\n') return false;
        i += s[i] == '\\' ? 2 : 1;
      }
      if (i >= s.size()) return false;
      i += close.size();
      continue;
    }
    if (c == '(' || c == '[' || c == '{') {
      ++depth;
      ++i;
      continue;
    }
    if (c == ')' || c == ']' || c == '}') {
      if (--depth < 0) return false;
      ++i;
      continue;
    }
    if (depth == 0 && (s.substr(i, 2) == "<<" || s.substr(i, 2) == ">>")) {
      i += 2;  // shifts, not comparisons
      continue;
    }
    if (depth == 0) {
      static const char* kOperators[] = {"==", "!=", "<=", ">=", "<", ">", ",", "-", ";"};
      bool matched = false;
      for (const char* op : kOperators) {
        const size_t n = std::strlen(op);
        if (s.substr(i, n) == op) {
          on_top(TopToken{op, i, i + n});
          i += n;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (is_word_char(c) && (i == 0 || !is_word_char(s[i - 1]))) {
        size_t end = i;
        while (end < s.size() && is_word_char(s[end])) ++end;
        const absl::string_view word = s.substr(i, end - i);
        for (const char* keyword : {"and", "or", "not", "in", "is", "if", "lambda"}) {
          if (word == keyword) on_top(TopToken{std::string(word), i, end});
        }
        i = end;
        continue;
      }
    }
    ++i;
  }
  return depth == 0;
}

absl::Status unsupported(absl::string_view statement, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "the test statement `", absl::StripAsciiWhitespace(statement).substr(0, 200), "` ", why,
      "; code_exec judges `assert E == literal` (or !=, <, <=, >, >=), `assert E`, `assert not "
      "E`, `assert abs(E - literal) < tol` and `assert math.isclose(E, literal, ...)`"));
}

// The statements of `test`: lines at bracket depth 0 end one, unless the next line is indented
// (a block belongs to its header).
std::vector<std::string> statements(absl::string_view test) {
  std::vector<std::string> out;
  std::string current;
  int depth = 0;
  bool in_string = false;
  std::string close;
  size_t i = 0;
  auto flush = [&] {
    if (!absl::StripAsciiWhitespace(current).empty()) out.push_back(current);
    current.clear();
  };
  while (i < test.size()) {
    const char c = test[i];
    if (in_string) {
      if (test.substr(i, close.size()) == close) {
        current += close;
        i += close.size();
        in_string = false;
        continue;
      }
      current.push_back(c);
      if (c == '\\' && i + 1 < test.size()) current.push_back(test[++i]);
      ++i;
      continue;
    }
    if (c == '\'' || c == '"') {
      close = test.substr(i, 3) == std::string(3, c) ? std::string(3, c) : std::string(1, c);
      current += close;
      i += close.size();
      in_string = true;
      continue;
    }
    if (c == '#') {
      while (i < test.size() && test[i] != '\n') current.push_back(test[i++]);
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c == '\\' && i + 1 < test.size() && test[i + 1] == '\n') {
      current += "\\\n";
      i += 2;
      continue;
    }
    if (c == '\n' && depth <= 0) {
      const bool next_indented = i + 1 < test.size() && (test[i + 1] == ' ' || test[i + 1] == '\t');
      current.push_back(c);
      ++i;
      if (!next_indented) flush();
      continue;
    }
    current.push_back(c);
    ++i;
  }
  flush();
  return out;
}

bool starts_with_word(absl::string_view s, absl::string_view word) {
  return absl::StartsWith(s, word) && (s.size() == word.size() || !is_word_char(s[word.size()]));
}

// The literal `text` as a number, for tolerances.
absl::StatusOr<double> literal_number(absl::string_view text, absl::string_view statement) {
  absl::StatusOr<PyValue> v = parse_python_literal(text);
  if (!v.ok() || !v->is_number())
    return unsupported(statement, "has a tolerance that is not a number");
  return v->as_double();
}

// `assert math.isclose(E, L, rel_tol=R, abs_tol=A)`: the arguments inside the parentheses.
absl::StatusOr<PyCheck> isclose_check(absl::string_view args, absl::string_view statement) {
  std::vector<absl::string_view> parts;
  size_t start = 0;
  bool ok = scan(args, [&](const TopToken& t) {
    if (t.text == ",") {
      parts.push_back(args.substr(start, t.begin - start));
      start = t.end;
    }
  });
  if (!ok) return unsupported(statement, "does not parse");
  if (!absl::StripAsciiWhitespace(args.substr(start)).empty()) parts.push_back(args.substr(start));
  if (parts.size() < 2) return unsupported(statement, "calls isclose with fewer than 2 arguments");
  PyCheck check;
  check.kind = PyCheck::Kind::kIsClose;
  check.tolerance = 1e-9;
  absl::StatusOr<PyValue> second = parse_python_literal(parts[1]);
  absl::StatusOr<PyValue> first = parse_python_literal(parts[0]);
  if (second.ok() && second->is_number()) {
    check.expression = std::string(absl::StripAsciiWhitespace(parts[0]));
    check.expected = *second;
  } else if (first.ok() && first->is_number()) {
    check.expression = std::string(absl::StripAsciiWhitespace(parts[1]));
    check.expected = *first;
  } else {
    return unsupported(statement, "compares with isclose two values neither of which is a number");
  }
  for (size_t i = 2; i < parts.size(); ++i) {
    absl::string_view kw = absl::StripAsciiWhitespace(parts[i]);
    const size_t eq = kw.find('=');
    if (eq == absl::string_view::npos)
      return unsupported(statement, "passes isclose a third positional argument");
    const absl::string_view name = absl::StripAsciiWhitespace(kw.substr(0, eq));
    FLYWHEEL_ASSIGN_OR_RETURN(double value, literal_number(kw.substr(eq + 1), statement));
    if (name == "rel_tol") {
      check.tolerance = value;
    } else if (name == "abs_tol") {
      check.abs_tol = value;
    } else {
      return unsupported(statement, absl::StrCat("passes isclose '", name, "'"));
    }
  }
  return check;
}

absl::StatusOr<PyCheck> plan_assert(absl::string_view statement) {
  absl::string_view body = absl::StripAsciiWhitespace(statement);
  body.remove_prefix(std::strlen("assert"));
  // The condition ends at a top-level comma (the message follows).
  std::vector<TopToken> tokens;
  bool ok = scan(body, [&](const TopToken& t) { tokens.push_back(t); });
  if (!ok) return unsupported(statement, "does not parse");
  for (const TopToken& t : tokens) {
    if (t.text == ";") return unsupported(statement, "holds several statements on one line");
  }
  for (const TopToken& t : tokens) {
    if (t.text == ",") {
      body = body.substr(0, t.begin);
      break;
    }
  }
  absl::string_view condition = absl::StripAsciiWhitespace(body);
  tokens.clear();
  scan(condition, [&](const TopToken& t) { tokens.push_back(t); });
  PyCheck check;
  check.source = std::string(absl::StripAsciiWhitespace(statement));
  std::vector<TopToken> comparisons;
  for (const TopToken& t : tokens) {
    if (t.text == "and" || t.text == "or" || t.text == "in" || t.text == "is" || t.text == "if" ||
        t.text == "lambda") {
      return unsupported(statement, absl::StrCat("uses `", t.text, "` at its top level"));
    }
    if (t.text == "not" && t.begin != 0) {
      return unsupported(statement, "uses `not` inside its condition");
    }
    if (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" ||
        t.text == ">=") {
      comparisons.push_back(t);
    }
  }
  if (comparisons.size() > 1) return unsupported(statement, "chains comparisons");
  if (comparisons.empty()) {
    if (starts_with_word(condition, "not")) {
      check.kind = PyCheck::Kind::kFalse;
      check.expression = std::string(absl::StripAsciiWhitespace(condition.substr(3)));
      return check;
    }
    for (absl::string_view call : {"math.isclose(", "isclose("}) {
      if (absl::StartsWith(condition, call) && absl::EndsWith(condition, ")")) {
        absl::StatusOr<PyCheck> close = isclose_check(
            condition.substr(call.size(), condition.size() - call.size() - 1), statement);
        if (close.ok()) close->source = check.source;
        return close;
      }
    }
    check.kind = PyCheck::Kind::kTrue;
    check.expression = std::string(condition);
    return check;
  }
  if (starts_with_word(condition, "not")) return unsupported(statement, "negates a comparison");
  const TopToken& op = comparisons[0];
  absl::string_view left = absl::StripAsciiWhitespace(condition.substr(0, op.begin));
  absl::string_view right = absl::StripAsciiWhitespace(condition.substr(op.end));
  // abs(E - L) < T
  if ((op.text == "<" || op.text == "<=") && absl::StartsWith(left, "abs(") &&
      absl::EndsWith(left, ")")) {
    absl::string_view inner = left.substr(4, left.size() - 5);
    std::vector<TopToken> minus;
    scan(inner, [&](const TopToken& t) {
      if (t.text == "-" && absl::StripAsciiWhitespace(inner.substr(0, t.begin)).size() > 0) {
        minus.push_back(t);
      }
    });
    if (!minus.empty()) {
      const TopToken& m = minus.back();
      absl::StatusOr<PyValue> a = parse_python_literal(inner.substr(m.end));
      absl::StatusOr<PyValue> b = parse_python_literal(inner.substr(0, m.begin));
      FLYWHEEL_ASSIGN_OR_RETURN(double tolerance, literal_number(right, statement));
      check.kind = PyCheck::Kind::kApprox;
      check.tolerance = tolerance;
      check.inclusive = op.text == "<=";
      if (a.ok() && a->is_number()) {
        check.expression = std::string(absl::StripAsciiWhitespace(inner.substr(0, m.begin)));
        check.expected = *a;
        return check;
      }
      if (b.ok() && b->is_number() && minus.size() == 1) {
        check.expression = std::string(absl::StripAsciiWhitespace(inner.substr(m.end)));
        check.expected = *b;
        return check;
      }
    }
    return unsupported(statement, "is not abs(E - number) < tolerance");
  }
  absl::StatusOr<PyValue> right_literal = parse_python_literal(right);
  absl::StatusOr<PyValue> left_literal = parse_python_literal(left);
  std::string kind = std::string(op.text);
  if (right_literal.ok()) {
    check.expression = std::string(left);
    check.expected = *right_literal;
  } else if (left_literal.ok()) {
    check.expression = std::string(right);
    check.expected = *left_literal;
    // L < E is E > L.
    if (kind == "<")
      kind = ">";
    else if (kind == ">")
      kind = "<";
    else if (kind == "<=")
      kind = ">=";
    else if (kind == ">=")
      kind = "<=";
  } else {
    return unsupported(statement, "compares two values neither of which is a literal");
  }
  check.kind = kind == "=="   ? PyCheck::Kind::kEqual
               : kind == "!=" ? PyCheck::Kind::kNotEqual
               : kind == "<"  ? PyCheck::Kind::kLess
               : kind == "<=" ? PyCheck::Kind::kLessEqual
               : kind == ">"  ? PyCheck::Kind::kGreater
                              : PyCheck::Kind::kGreaterEqual;
  return check;
}

// -1, 0, 1 for a < b, a == b, a > b on numbers or strings; false when they do not order.
bool order(const PyValue& a, const PyValue& b, int* out) {
  if (a.is_number() && b.is_number()) {
    const double x = a.as_double(), y = b.as_double();
    if (std::isnan(x) || std::isnan(y)) return false;
    *out = x < y ? -1 : x > y ? 1 : 0;
    return true;
  }
  if (a.kind == PyValue::Kind::kStr && b.kind == PyValue::Kind::kStr) {
    *out = a.text < b.text ? -1 : a.text > b.text ? 1 : 0;  // UTF-8 orders as code points
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<PyStep>> plan_python_test(absl::string_view test) {
  std::vector<PyStep> steps;
  for (const std::string& statement : statements(test)) {
    absl::string_view s = absl::StripLeadingAsciiWhitespace(statement);
    PyStep step;
    if (starts_with_word(s, "assert")) {
      FLYWHEEL_ASSIGN_OR_RETURN(PyCheck check, plan_assert(statement));
      step.is_check = true;
      step.check = std::move(check);
    } else {
      bool nested_assert = false;
      std::string body(s);
      for (size_t at = body.find("assert"); at != std::string::npos;
           at = body.find("assert", at + 1)) {
        const bool word_start = at == 0 || !is_word_char(body[at - 1]);
        const bool word_end = at + 6 >= body.size() || !is_word_char(body[at + 6]);
        nested_assert = nested_assert || (word_start && word_end);
      }
      if (nested_assert) return unsupported(statement, "holds an assert inside a block");
      step.code = statement;
    }
    steps.push_back(std::move(step));
  }
  bool any_check = false;
  for (const PyStep& step : steps) any_check = any_check || step.is_check;
  if (!any_check) return unsupported(test, "holds no assert");
  return steps;
}

bool check_passes(const PyCheck& check, const PyValue& value) {
  switch (check.kind) {
    case PyCheck::Kind::kEqual:
      return value.canonical() == check.expected.canonical();
    case PyCheck::Kind::kNotEqual:
      return value.canonical() != check.expected.canonical();
    case PyCheck::Kind::kTrue:
    case PyCheck::Kind::kFalse:
      return value.kind == PyValue::Kind::kBool &&
             value.boolean == (check.kind == PyCheck::Kind::kTrue);
    case PyCheck::Kind::kApprox: {
      if (!value.is_number()) return false;
      const double d = std::fabs(value.as_double() - check.expected.as_double());
      return check.inclusive ? d <= check.tolerance : d < check.tolerance;
    }
    case PyCheck::Kind::kIsClose: {
      if (!value.is_number()) return false;
      const double a = value.as_double(), b = check.expected.as_double();
      if (a == b) return true;
      if (std::isinf(a) || std::isinf(b)) return false;
      const double d = std::fabs(a - b);
      return d <= std::max(check.tolerance * std::max(std::fabs(a), std::fabs(b)), check.abs_tol);
    }
    default: {
      int c = 0;
      if (!order(value, check.expected, &c)) return false;
      switch (check.kind) {
        case PyCheck::Kind::kLess:
          return c < 0;
        case PyCheck::Kind::kLessEqual:
          return c <= 0;
        case PyCheck::Kind::kGreater:
          return c > 0;
        default:
          return c >= 0;
      }
    }
  }
}

}  // namespace flywheel::rewards
