#include "pretokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "flywheel/core/utf8.h"

namespace flywheel::model {
namespace {

constexpr absl::string_view kSpaceSet = "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}";

// The budget of one text, spent by the auto-callout before each pattern item.
struct Work {
  int64_t left = 0;
  int64_t used = 0;
  size_t position = 0;  // the match position at the previous callout
  bool exhausted = false;
};

int spend(pcre2_callout_block* block, void* data) {
  Work* work = static_cast<Work*>(data);
  const size_t now = block->current_position;
  const size_t moved = now > work->position ? now - work->position : work->position - now;
  work->position = now;
  const int64_t cost = 1 + static_cast<int64_t>(moved);
  work->used += cost;
  if (cost > work->left) {
    work->exhausted = true;
    return PCRE2_ERROR_CALLOUT;  // abandons the match
  }
  work->left -= cost;
  return 0;
}

int count_item(pcre2_callout_enumerate_block* /*block*/, void* data) {
  ++*static_cast<int64_t*>(data);
  return 0;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(code, message, sizeof(message));
  return reinterpret_cast<char*>(message);
}

}  // namespace

struct PretokenizerRegex::Impl {
  std::string pattern;
  pcre2_code* code = nullptr;
  int64_t items = 0;  // auto-callouts: one before each item, one at the end
  Options options;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

PretokenizerRegex::~PretokenizerRegex() = default;

std::string PretokenizerRegex::translate(absl::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        absl::StrAppend(&out, in_class ? "" : "[", kSpaceSet, in_class ? "" : "]");
      } else if (e == 'S' && !in_class) {
        absl::StrAppend(&out, "[^", kSpaceSet, "]");
      } else {
        // \S inside a class has no simple rewrite; these patterns never use it, PCRE2 keeps it.
        out.push_back('\\');
        out.push_back(e);
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' or '^]' right after '[' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PretokenizerRegex>> PretokenizerRegex::compile(
    const std::string& pattern, const Options& options) {
  std::string translated = translate(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                                   translated.size(), PCRE2_UTF | PCRE2_UCP | PCRE2_AUTO_CALLOUT,
                                   &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot compile pre-tokenizer regex '", pattern,
                                                   "': ", pcre2_message(error_code), " at offset ",
                                                   error_offset));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if unavailable
  std::unique_ptr<PretokenizerRegex> regex(new PretokenizerRegex());
  regex->impl_ = std::make_unique<Impl>();
  regex->impl_->pattern = pattern;
  regex->impl_->code = code;
  regex->impl_->options = options;
  pcre2_callout_enumerate(code, count_item, &regex->impl_->items);
  return regex;
}

int64_t PretokenizerRegex::budget(size_t bytes) const {
  const Options& o = impl_->options;
  const int64_t per_byte = o.work_per_byte + o.work_per_item * impl_->items;
  const int64_t n = static_cast<int64_t>(bytes) + 1;
  const int64_t max = std::numeric_limits<int64_t>::max();
  if (per_byte > 0 && n > (max - o.base_work) / per_byte) return max;
  return o.base_work + n * per_byte;
}

absl::Status PretokenizerRegex::for_each_match(
    absl::string_view text, absl::FunctionRef<absl::Status(size_t, size_t)> on_match,
    Stats* stats) const {
  // Checked once here: without PCRE2_NO_UTF_CHECK, PCRE2 re-checks the rest of the text on every
  // call, which made a text of n bytes cost O(n^2).
  if (!core::is_valid_utf8(text)) {
    return absl::InvalidArgumentError("pre-tokenizer input is not valid UTF-8");
  }
  Work work;
  work.left = budget(text.size());
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_set_callout(context, spend, &work);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  int64_t calls = 0;
  size_t start = 0;
  absl::Status status;
  while (start <= text.size()) {
    work.position = start;
    ++calls;
    int rc = pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                         PCRE2_NO_UTF_CHECK, data, context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0 && work.exhausted) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "pre-tokenizer regex '", impl_->pattern, "' exceeded its work budget of ",
          budget(text.size()), " steps for a text of ", text.size(), " bytes (at byte ", start,
          "): the pattern backtracks or looks ahead too far"));
      break;
    }
    if (rc < 0) {
      status = absl::InvalidArgumentError(
          absl::StrCat("pre-tokenizer regex '", impl_->pattern, "' failed: ", pcre2_message(rc)));
      break;
    }
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // empty match: step over one character
      if (begin >= text.size()) break;
      size_t step = 1;
      while (begin + step < text.size() &&
             (static_cast<unsigned char>(text[begin + step]) & 0xC0) == 0x80) {
        ++step;
      }
      start = begin + step;
      continue;
    }
    status = on_match(begin, end);
    if (!status.ok()) break;
    start = end;
  }
  pcre2_match_data_free(data);
  pcre2_match_context_free(context);
  if (stats != nullptr) {
    stats->calls = calls;
    stats->work = work.used;
    stats->budget = budget(text.size());
  }
  return status;
}

absl::StatusOr<std::vector<std::pair<size_t, size_t>>> PretokenizerRegex::find_all(
    absl::string_view text, Stats* stats) const {
  std::vector<std::pair<size_t, size_t>> matches;
  absl::Status status = for_each_match(
      text,
      [&](size_t begin, size_t end) {
        matches.emplace_back(begin, end);
        return absl::OkStatus();
      },
      stats);
  if (!status.ok()) return status;
  return matches;
}

}  // namespace flywheel::model
