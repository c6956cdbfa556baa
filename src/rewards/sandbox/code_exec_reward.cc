#include "sandbox/code_exec_reward.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "builtin_factories.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/rewards/params.h"
#include "sandbox/sandbox.h"

namespace flywheel::rewards {
namespace {

constexpr char kName[] = "code_exec";

struct TestCase {
  bool is_assertion = false;
  std::string input;     // stdin (stdin/stdout tests)
  std::string expected;  // stdout (stdin/stdout tests) or the assertion code
};

absl::Status bad_tests(const RewardInput& input, const std::string& key,
                       absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(input.record_name, ": reward '", kName, "': record['", key, "'] ", problem));
}

absl::StatusOr<std::vector<TestCase>> parse_tests(const RewardInput& input, const std::string& key,
                                                  const core::Json& tests, int depth = 0) {
  std::vector<TestCase> out;
  if (tests.is_string() && depth == 0) {
    absl::StatusOr<core::Json> parsed = core::Json::parse(tests.as_string());
    if (!parsed.ok()) {
      return bad_tests(input, key,
                       absl::StrCat("is a string but not JSON: ", parsed.status().message()));
    }
    return parse_tests(input, key, *parsed, depth + 1);
  }
  if (tests.is_object()) {
    const core::Json* inputs = tests.find("inputs");
    const core::Json* outputs = tests.find("outputs");
    if (!inputs || !outputs || !inputs->is_array() || !outputs->is_array() ||
        inputs->as_array().size() != outputs->as_array().size()) {
      return bad_tests(input, key,
                       "is an object but not {\"inputs\": [...], \"outputs\": [...]} of one "
                       "length");
    }
    for (size_t i = 0; i < inputs->as_array().size(); ++i) {
      const core::Json& in = inputs->as_array()[i];
      const core::Json& expected = outputs->as_array()[i];
      if (!in.is_string() || !expected.is_string()) {
        return bad_tests(input, key,
                         absl::StrCat("test ", i, ": inputs and outputs must be strings"));
      }
      out.push_back({false, in.as_string(), expected.as_string()});
    }
  } else if (tests.is_array()) {
    for (size_t i = 0; i < tests.as_array().size(); ++i) {
      const core::Json& item = tests.as_array()[i];
      if (item.is_string()) {
        out.push_back({true, "", item.as_string()});
        continue;
      }
      const core::Json* in = item.find("input");
      const core::Json* expected = item.find("output");
      if (!item.is_object() || !expected || !expected->is_string() || (in && !in->is_string())) {
        return bad_tests(input, key,
                         absl::StrCat("test ", i,
                                      " is neither assertion code nor {\"input\": "
                                      "string, \"output\": string}"));
      }
      out.push_back({false, in ? in->as_string() : "", expected->as_string()});
    }
  } else {
    return bad_tests(
        input, key,
        absl::StrCat("is ", core::Json::type_name(tests.type()), "; expected a list of tests"));
  }
  if (out.empty()) return bad_tests(input, key, "holds no tests");
  return out;
}

std::string find_in_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct CodeExecOptions {
  bool cpp = false;
  std::string python;
  std::string cxx;
  std::vector<std::string> cxx_flags;
  std::string tests_key;
  bool stop_on_first_failure = false;
};

class CodeExecReward final : public RewardFunction {
 public:
  CodeExecReward(CodeExecOptions options, std::unique_ptr<Sandbox> run_sandbox,
                 std::unique_ptr<Sandbox> compile_sandbox)
      : options_(std::move(options)),
        run_sandbox_(std::move(run_sandbox)),
        compile_sandbox_(std::move(compile_sandbox)) {}

  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override {
    const core::Json* tests_json = input.record->find(options_.tests_key);
    if (!tests_json) return missing_key_error(input, kName, options_.tests_key);
    FLYWHEEL_ASSIGN_OR_RETURN(std::vector<TestCase> tests,
                              parse_tests(input, options_.tests_key, *tests_json));
    RewardOutput out;
    out.components = {{"passed", 0}, {"has_code", 0}, {"timeouts", 0}};
    if (options_.cpp) out.components["compiled"] = 0;
    const std::vector<std::string> languages =
        options_.cpp ? std::vector<std::string>{"cpp", "c++", "cc", "cxx", ""}
                     : std::vector<std::string>{"python", "py", "python3", "py3", ""};
    std::optional<std::string> code = extract_last_code_block(input.completion, languages);
    if (!code || absl::StripAsciiWhitespace(*code).empty()) return out;
    out.components["has_code"] = 1;

    SandboxRequest request;
    if (options_.cpp) {
      for (const TestCase& test : tests) {
        if (test.is_assertion) {
          return bad_tests(input, options_.tests_key,
                           "holds assertion code, which needs language: python");
        }
      }
      FLYWHEEL_ASSIGN_OR_RETURN(std::optional<std::string> binary, compile(*code));
      if (!binary) return out;
      out.components["compiled"] = 1;
      request.argv = {"./solution"};
      request.files = {{"solution", std::move(*binary), /*executable=*/true}};
    } else {
      request.argv = {options_.python, "-I", "-B", "solution.py"};
      request.files = {{"solution.py", *code}};
    }

    int passed = 0;
    int timeouts = 0;
    for (const TestCase& test : tests) {
      if (!options_.cpp) {
        request.files[0].contents =
            test.is_assertion ? absl::StrCat(*code, "\n\n", test.expected, "\n") : *code;
      }
      request.stdin_data = test.input;
      FLYWHEEL_ASSIGN_OR_RETURN(SandboxResult result, run_sandbox_->run(request));
      timeouts += result.timed_out ? 1 : 0;
      const bool ok = result.success() && !result.stdout_truncated &&
                      (test.is_assertion || outputs_match(result.stdout_data, test.expected));
      passed += ok ? 1 : 0;
      if (!ok && options_.stop_on_first_failure) break;
    }
    const double n = static_cast<double>(tests.size());
    out.score = passed / n;
    out.components["passed"] = out.score;
    out.components["timeouts"] = timeouts / n;
    return out;
  }

 private:
  // The compiled binary, or nullopt when the code does not compile (in time).
  absl::StatusOr<std::optional<std::string>> compile(const std::string& code) const {
    SandboxRequest request;
    request.argv = {options_.cxx};
    request.argv.insert(request.argv.end(), options_.cxx_flags.begin(), options_.cxx_flags.end());
    for (const char* arg : {"-o", "solution", "solution.cpp"}) request.argv.push_back(arg);
    request.files = {{"solution.cpp", code}};
    request.output_files = {"solution"};
    FLYWHEEL_ASSIGN_OR_RETURN(SandboxResult result, compile_sandbox_->run(request));
    auto binary = result.output_files.find("solution");
    if (!result.success() || binary == result.output_files.end()) return std::nullopt;
    return std::move(binary->second);
  }

  CodeExecOptions options_;
  std::unique_ptr<Sandbox> run_sandbox_;
  std::unique_ptr<Sandbox> compile_sandbox_;  // null for python
};

bool is_fence(absl::string_view line, size_t* ticks, absl::string_view* info) {
  line = absl::StripLeadingAsciiWhitespace(line);
  size_t n = 0;
  while (n < line.size() && line[n] == '`') ++n;
  if (n < 3) return false;
  *ticks = n;
  *info = absl::StripAsciiWhitespace(line.substr(n));
  return true;
}

absl::string_view strip_line_end(absl::string_view line) {
  size_t end = line.size();
  while (end > 0 && absl::ascii_isspace(static_cast<unsigned char>(line[end - 1]))) --end;
  return line.substr(0, end);
}

}  // namespace

std::optional<std::string> extract_last_code_block(absl::string_view text,
                                                   const std::vector<std::string>& languages) {
  std::optional<std::string> last;
  bool open = false;
  size_t open_ticks = 0;
  bool wanted = false;
  size_t body_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view line = text.substr(pos, end - pos);
    size_t ticks = 0;
    absl::string_view info;
    if (is_fence(line, &ticks, &info)) {
      if (!open) {
        open = true;
        open_ticks = ticks;
        std::string language(info.substr(0, info.find_first_of(" \t{")));
        absl::AsciiStrToLower(&language);
        wanted = std::find(languages.begin(), languages.end(), language) != languages.end();
        body_start = std::min(end + 1, text.size());
      } else if (info.empty() && ticks >= open_ticks) {
        open = false;
        if (wanted) last = std::string(text.substr(body_start, pos - body_start));
      }
    }
    pos = end + 1;
  }
  return last;
}

bool outputs_match(absl::string_view actual, absl::string_view expected) {
  std::vector<absl::string_view> a = absl::StrSplit(actual, '\n');
  std::vector<absl::string_view> b = absl::StrSplit(expected, '\n');
  for (auto* lines : {&a, &b}) {
    for (absl::string_view& line : *lines) line = strip_line_end(line);
    while (!lines->empty() && lines->back().empty()) lines->pop_back();
  }
  return a == b;
}

RewardPtr make_code_exec_reward(const RewardSpec& spec) {
  ParamReader r(spec);
  CodeExecOptions options;
  options.cpp = r.choice("language", "python", {"python", "cpp"}) == "cpp";
  options.python = r.string("python", "/usr/bin/python3");
  const std::string cxx = r.string("cxx", "g++");
  options.cxx_flags = absl::StrSplit(r.string("cxx_flags", "-O2 -std=c++17"),
                                     absl::ByAnyChar(" \t"), absl::SkipEmpty());
  options.tests_key = r.string("tests_key", "tests");
  SandboxOptions run;
  run.wall_timeout_s = r.number_in("timeout_s", 5, 0.01, 3600);
  run.memory_bytes = r.integer("memory_mb", 1024, 16, int64_t{1} << 20) << 20;
  run.max_stdout_bytes = r.integer("max_output_kb", 2048, 1, int64_t{1} << 20) << 10;
  run.max_processes = static_cast<int>(r.integer("max_processes", 32, 2, 1 << 16));
  run.tmpfs_bytes = r.integer("tmpfs_mb", 64, 1, int64_t{1} << 20) << 20;
  run.allow_network_fallback = r.boolean("allow_network_fallback", false);
  run.kill_on_stdout_overflow = true;  // a test whose output overflows has failed
  SandboxOptions build = run;
  build.wall_timeout_s = r.number_in("compile_timeout_s", 30, 0.1, 3600);
  build.memory_bytes = r.integer("compile_memory_mb", 2048, 64, int64_t{1} << 20) << 20;
  build.max_processes = std::max(run.max_processes, 64);
  build.max_file_bytes = build.tmpfs_bytes;
  build.max_output_file_bytes = build.tmpfs_bytes;
  build.kill_on_stdout_overflow = false;
  options.stop_on_first_failure = r.boolean("stop_on_first_failure", false);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());

  const std::string where = absl::StrCat("reward '", spec.name, "': ");
  if (!options.cpp) {
    if (options.python.empty() || options.python[0] != '/' ||
        access(options.python.c_str(), X_OK) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, "option 'python' is '", options.python,
                                                     "'; must be an executable absolute path"));
    }
  } else {
    options.cxx = find_in_path(cxx);
    if (options.cxx.empty() || access(options.cxx.c_str(), X_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "option 'cxx' is '", cxx, "'; no such executable"));
    }
    if (options.cxx[0] != '/') {
      options.cxx = absl::StrCat(std::filesystem::absolute(options.cxx).string());
    }
  }
  absl::StatusOr<std::unique_ptr<Sandbox>> run_sandbox = Sandbox::create(run);
  absl::StatusOr<std::unique_ptr<Sandbox>> compile_sandbox = std::unique_ptr<Sandbox>();
  if (run_sandbox.ok() && options.cpp) compile_sandbox = Sandbox::create(build);
  for (const auto* sandbox : {&run_sandbox, &compile_sandbox}) {
    if (!sandbox->ok()) {
      return absl::Status(sandbox->status().code(),
                          absl::StrCat(where, sandbox->status().message()));
    }
  }
  return std::unique_ptr<RewardFunction>(
      new CodeExecReward(std::move(options), *std::move(run_sandbox), *std::move(compile_sandbox)));
}

}  // namespace flywheel::rewards
