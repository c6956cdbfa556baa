// json_bench: parse time and peak memory of a Hugging Face tokenizer.json (the Qwen3 one by
// default), as a core::Json tree and as a whole tokenizer load, printed beside a memcpy of the
// same bytes measured in the same run (the memory-bandwidth bound no parser can beat).
//
//   build/benchmarks/json_bench [--tokenizer DIR] [--rounds 3]
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "bench_util.h"
#include "flywheel/core/file_io.h"
#include "flywheel/core/json.h"
#include "flywheel/model/tokenizer/tokenizer.h"

namespace {

using flywheel::bench::Clock;
using flywheel::bench::seconds_since;
using flywheel::core::Json;

// A field of /proc/self/status in KiB ("VmRSS", "VmHWM").
long status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') {
      return std::strtol(line.c_str() + n + 1, nullptr, 10);
    }
  }
  return -1;
}

// Returns freed heap to the system, then resets the peak resident set (VmHWM) to the current
// one, so that a measurement's peak is not hidden by pages an earlier one left mapped.
void reset_peak() {
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
}

int64_t count_values(const Json& j) {
  int64_t n = 1;
  if (j.is_array()) {
    for (const Json& v : j.as_array()) n += count_values(v);
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.as_object()) n += count_values(v);
  }
  return n;
}

struct Run {
  double best_s = 1e30;
  double peak_mib = 0;  // peak resident set above the one at the start of the first round
};

template <typename Fn>
Run measure(int rounds, Fn fn) {
  Run run;
  for (int r = 0; r < rounds; ++r) {
    reset_peak();
    const long before = status_kib("VmRSS");
    const auto start = Clock::now();
    fn();
    const double s = seconds_since(start);
    run.best_s = std::min(run.best_s, s);
    if (r == 0) run.peak_mib = static_cast<double>(status_kib("VmHWM") - before) / 1024.0;
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef FLYWHEEL_DEFAULT_TOKENIZER_DIR
  std::string dir = FLYWHEEL_DEFAULT_TOKENIZER_DIR;
#else
  std::string dir;
#endif
  int rounds = 3;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokenizer")) {
      dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--rounds")) {
      rounds = std::max(1, std::atoi(argv[++i]));
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "json_bench: --tokenizer DIR (a directory with tokenizer.json)\n");
    return 2;
  }
  const std::string path = dir + "/tokenizer.json";
  flywheel::core::ReadFileOptions read_options;
  read_options.max_bytes = int64_t{1} << 30;
  auto text = flywheel::core::read_file(path, read_options);
  if (!text.ok()) {
    std::fprintf(stderr, "%s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  const double mb = static_cast<double>(text->size()) / 1e6;

  std::string copy(text->size(), '\0');
  const Run memcpy_run = measure(rounds * 4, [&] {
    std::memcpy(copy.data(), text->data(), text->size());
    asm volatile("" : : "r"(copy.data()) : "memory");
  });

  int64_t values = 0;
  const Run parse_run = measure(rounds, [&] {
    auto parsed = Json::parse(*text);
    if (!parsed.ok()) {
      std::fprintf(stderr, "%s\n", std::string(parsed.status().message()).c_str());
      std::exit(1);
    }
    values = count_values(*parsed);
  });
  const Run load_run = measure(rounds, [&] {
    auto tokenizer = flywheel::model::load_hf_tokenizer_json(*text, path);
    if (!tokenizer.ok()) {
      std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
      std::exit(1);
    }
  });

  std::printf("json_bench: %s (%.1f MB, %lld values)\n", path.c_str(), mb,
              static_cast<long long>(values));
  std::printf("%-22s %10s %10s %12s %14s\n", "", "seconds", "MB/s", "peak MiB", "bytes/value");
  std::printf("%-22s %10.4f %10.0f %12s %14s\n", "memcpy (the bound)", memcpy_run.best_s,
              mb / memcpy_run.best_s, "-", "-");
  std::printf("%-22s %10.4f %10.0f %12.1f %14.1f\n", "Json::parse", parse_run.best_s,
              mb / parse_run.best_s, parse_run.peak_mib,
              parse_run.peak_mib * 1048576.0 / static_cast<double>(values));
  std::printf("%-22s %10.4f %10.0f %12.1f %14s\n", "tokenizer load", load_run.best_s,
              mb / load_run.best_s, load_run.peak_mib, "-");
  return 0;
}
