// tokenizer_bench: encoding throughput of a Hugging Face tokenizer on texts from 16 KB to 4 MB,
// printed beside a plain pass over the same bytes (UTF-8 validation) measured in the same run.
// MB/s that stays flat as the text grows means encoding is linear in the text length.
//
//   build/benchmarks/tokenizer_bench [--tokenizer DIR] [--max-kb 4096] [--text mixed|spaces|...]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "flywheel/core/utf8.h"
#include "flywheel/model/tokenizer/tokenizer.h"

namespace {

using flywheel::bench::Clock;
using flywheel::bench::seconds_since;

// Repeats `unit` up to `bytes` bytes.
std::string repeat(const std::string& unit, size_t bytes) {
  std::string text;
  text.reserve(bytes + unit.size());
  while (text.size() < bytes) text += unit;
  return text;
}

// Prose, code, digits, CJK, emoji and whitespace runs: every alternative of the Qwen3 / Llama 3
// pre-tokenizer regex is exercised.
const char* kMixed =
    "The quick brown fox jumps over the lazy dog; it's 2024 and we've 1,234,567 reasons.\n"
    "def f(x):\n    return x ** 2  # squares\n\n"
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81 "
    "\xF0\x9F\x98\x80\xF0\x9F\x91\x8D\t\t  \n";

std::string text_of(const std::string& kind, size_t bytes) {
  if (kind == "spaces") return repeat(" ", bytes);
  if (kind == "digits") return repeat("7", bytes);
  if (kind == "letters") return repeat("a", bytes);
  if (kind == "cjk") return repeat("\xE4\xBD\xA0", bytes);
  return repeat(kMixed, bytes);
}

}  // namespace

int main(int argc, char** argv) {
#ifdef FLYWHEEL_DEFAULT_TOKENIZER_DIR
  std::string dir = FLYWHEEL_DEFAULT_TOKENIZER_DIR;
#else
  std::string dir;
#endif
  size_t max_kb = 4096;
  std::vector<std::string> kinds = {"mixed", "spaces", "digits", "cjk"};
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokenizer")) {
      dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--max-kb")) {
      max_kb = std::strtoul(argv[++i], nullptr, 10);
    } else if (!std::strcmp(argv[i], "--text")) {
      kinds = {argv[++i]};
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "tokenizer_bench: --tokenizer DIR (a directory with tokenizer.json)\n");
    return 2;
  }
  auto tokenizer = flywheel::model::load_tokenizer(dir, "hf");
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  std::printf("tokenizer_bench: %s\n", dir.c_str());
  std::printf("%-7s %9s %10s %10s %12s %14s\n", "text", "size", "seconds", "MB/s", "tokens",
              "UTF-8 MB/s");
  for (const std::string& kind : kinds) {
    for (size_t kb = 16; kb <= max_kb; kb *= 4) {
      const std::string text = text_of(kind, kb << 10);
      const auto start = Clock::now();
      auto ids = (*tokenizer)->encode(text);
      const double seconds = seconds_since(start);
      if (!ids.ok()) {
        std::printf("%-7s %7zu KB  error: %s\n", kind.c_str(), kb,
                    std::string(ids.status().message()).c_str());
        break;
      }
      bool valid = true;
      const double utf8 = flywheel::bench::best_time(
          3, [&] { valid = flywheel::core::is_valid_utf8(text) && valid; });
      if (!valid) return 1;
      std::printf("%-7s %6zu KB %10.3f %10.2f %12zu %14.0f\n", kind.c_str(), kb, seconds,
                  text.size() / seconds / 1e6, ids->size(), text.size() / utf8 / 1e6);
      std::fflush(stdout);
      if (seconds > 10) {  // quadratic: larger sizes would take minutes
        std::printf("%-7s (stopping: over 10 s)\n", kind.c_str());
        break;
      }
    }
  }
  return 0;
}
