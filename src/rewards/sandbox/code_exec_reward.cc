#include "sandbox/code_exec_reward.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "builtin_factories.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/rewards/param_reader.h"
#include "sandbox/python_harness.h"
#include "sandbox/python_tests.h"
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
  double timeout_s = 5;               // per test
  double call_timeout_s = 0;          // rewards.timeout_s; 0 = none
  std::vector<std::string> sys_path;  // the interpreter's, for the harness (python_sys_path)
};

using Clock = std::chrono::steady_clock;

// Time a call keeps for itself before the scoring pool's deadline: to read the last result and
// return.
constexpr double kDeadlineMarginS = 0.25;
// The harness's own start (interpreter, plan, fork) before the first test's clock runs.
constexpr double kHarnessStartS = 2;

class CodeExecReward final : public RewardFunction {
 public:
  CodeExecReward(CodeExecOptions options, std::unique_ptr<Sandbox> run_sandbox,
                 std::unique_ptr<Sandbox> compile_sandbox)
      : options_(std::move(options)),
        run_sandbox_(std::move(run_sandbox)),
        compile_sandbox_(std::move(compile_sandbox)) {}

  absl::StatusOr<RewardOutput> score(const RewardInput& input) const override {
    // Stop before the scoring pool gives up on this call: a score of its own, no sandbox left.
    const Clock::time_point deadline =
        options_.call_timeout_s > 0
            ? Clock::now() +
                  std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(options_.call_timeout_s - kDeadlineMarginS))
            : Clock::time_point::max();
    const core::Json* tests_json = input.record->find(options_.tests_key);
    if (!tests_json) return missing_key_error(input, kName, options_.tests_key);
    FLYWHEEL_ASSIGN_OR_RETURN(std::vector<TestCase> tests,
                              parse_tests(input, options_.tests_key, *tests_json));
    std::vector<std::vector<PyStep>> plans(tests.size());
    for (size_t i = 0; i < tests.size(); ++i) {
      if (!tests[i].is_assertion) continue;
      if (options_.cpp) {
        return bad_tests(input, options_.tests_key,
                         "holds assertion code, which needs language: python");
      }
      absl::StatusOr<std::vector<PyStep>> plan = plan_python_test(tests[i].expected);
      if (!plan.ok()) {
        return bad_tests(input, options_.tests_key,
                         absl::StrCat("test ", i, ": ", plan.status().message()));
      }
      plans[i] = std::move(*plan);
    }
    RewardOutput out;
    out.components = {{"passed", 0}, {"has_code", 0}, {"timeouts", 0}, {"deadline_stops", 0}};
    if (options_.cpp) out.components["compiled"] = 0;
    const std::vector<std::string> languages =
        options_.cpp ? std::vector<std::string>{"cpp", "c++", "cc", "cxx", ""}
                     : std::vector<std::string>{"python", "py", "python3", "py3", ""};
    std::optional<std::string> code = extract_last_code_block(input.completion, languages);
    if (!code || absl::StripAsciiWhitespace(*code).empty()) return out;
    out.components["has_code"] = 1;

    SandboxRequest program;
    if (options_.cpp) {
      FLYWHEEL_ASSIGN_OR_RETURN(std::optional<std::string> binary, compile(*code));
      if (!binary) return out;
      out.components["compiled"] = 1;
      program.argv = {"./solution"};
      program.files = {{"solution", std::move(*binary), /*executable=*/true}};
    } else {
      program.argv = {options_.python, "-I", "-B", "solution.py"};
      program.files = {{"solution.py", *code}};
    }
    std::vector<bool> passed(tests.size(), false);
    int timeouts = 0;
    bool stopped = false;
    auto left_s = [&] { return std::chrono::duration<double>(deadline - Clock::now()).count(); };
    // Assertion tests: one harness run for all of them.
    std::vector<size_t> assertions;
    for (size_t i = 0; i < tests.size(); ++i) {
      if (tests[i].is_assertion) assertions.push_back(i);
    }
    bool failed = false;
    if (!assertions.empty()) {
      FLYWHEEL_RETURN_IF_ERROR(
          run_assertions(*code, plans, assertions, left_s(), &passed, &timeouts, &stopped));
      for (size_t i : assertions) failed = failed || !passed[i];
    }
    // stdin / stdout tests: a run each, compared here.
    for (size_t i = 0; i < tests.size(); ++i) {
      if (tests[i].is_assertion) continue;
      if (stopped || (failed && options_.stop_on_first_failure)) break;
      const double left = left_s();
      if (left < 0.05) {
        stopped = true;
        break;
      }
      program.stdin_data = tests[i].input;
      program.wall_timeout_s = std::min(options_.timeout_s, left);
      FLYWHEEL_ASSIGN_OR_RETURN(SandboxResult result, run_sandbox_->run(program));
      timeouts += result.timed_out ? 1 : 0;
      if (result.timed_out && left < options_.timeout_s) stopped = true;
      passed[i] = result.success() && !result.stdout_truncated &&
                  outputs_match(result.stdout_data, tests[i].expected);
      failed = failed || !passed[i];
    }
    int total = 0;
    for (bool p : passed) total += p ? 1 : 0;
    const double n = static_cast<double>(tests.size());
    out.score = total / n;
    out.components["passed"] = out.score;
    out.components["timeouts"] = timeouts / n;
    out.components["deadline_stops"] = stopped ? 1 : 0;
    return out;
  }

 private:
  // Runs the assertion tests `indices` in one harness run (python_harness.h) and judges their
  // values here; `left_s` is what remains of the call's deadline.
  absl::Status run_assertions(const std::string& code,
                              const std::vector<std::vector<PyStep>>& plans,
                              const std::vector<size_t>& indices, double left_s,
                              std::vector<bool>* passed, int* timeouts, bool* stopped) const {
    const double wall = kHarnessStartS + options_.timeout_s * static_cast<double>(indices.size());
    if (left_s < 0.05) {
      *stopped = true;
      return absl::OkStatus();
    }
    std::vector<std::vector<PyStep>> run_plans;
    for (size_t i : indices) run_plans.push_back(plans[i]);
    const std::string nonce = make_nonce();
    SandboxRequest request;
    HarnessPlan plan{code, std::move(run_plans), options_.timeout_s, options_.sys_path};
    request.argv = {options_.python, "-I", "-B", "harness.py"};
    if (!plan.sys_path.empty()) request.argv.insert(request.argv.begin() + 1, "-S");
    request.files = {{"harness.py", python_harness_source()}};
    request.stdin_data = python_harness_input(plan, nonce);
    request.wall_timeout_s = std::min(wall, left_s);
    FLYWHEEL_ASSIGN_OR_RETURN(SandboxResult result, run_sandbox_->run(request));
    const std::vector<HarnessResult> results =
        read_harness_output(result.stdout_data, nonce, indices.size());
    for (size_t k = 0; k < indices.size(); ++k) {
      const HarnessResult& r = results[k];
      if (r.kind == HarnessResult::Kind::kTimeout ||
          (r.kind == HarnessResult::Kind::kMissing && result.timed_out)) {
        ++*timeouts;
        if (result.timed_out && left_s < wall) *stopped = true;
        break;  // the rest did not run
      }
      if (r.kind != HarnessResult::Kind::kValues) continue;
      std::vector<const PyCheck*> checks;
      for (const PyStep& step : plans[indices[k]]) {
        if (step.is_check) checks.push_back(&step.check);
      }
      bool ok = r.values.size() == checks.size();
      for (size_t c = 0; ok && c < checks.size(); ++c) ok = check_passes(*checks[c], r.values[c]);
      (*passed)[indices[k]] = ok;
      if (!ok && options_.stop_on_first_failure) break;
    }
    return absl::OkStatus();
  }

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
  options.timeout_s = r.number_in("timeout_s", 5, 0.01, 3600);
  // Each run says its own wall-clock limit (a test's, the harness's for all of them, or what is
  // left of the call); this only caps them.
  run.wall_timeout_s = 86400;
  run.cpu_s = std::ceil(options.timeout_s) + 1;  // per process
  run.memory_bytes = r.integer("memory_mb", 1024, 16, int64_t{1} << 20) << 20;
  run.total_memory_bytes =
      r.integer("total_memory_mb", run.memory_bytes >> 20, 16, int64_t{1} << 20) << 20;
  run.cgroups = r.boolean("cgroups", false);
  run.max_stdout_bytes = r.integer("max_output_kb", 2048, 1, int64_t{1} << 20) << 10;
  run.max_processes = static_cast<int>(r.integer("max_processes", 8, 2, 1 << 16));
  run.tmpfs_bytes = r.integer("tmpfs_mb", 64, 1, int64_t{1} << 20) << 20;
  run.allow_network_fallback = r.boolean("allow_network_fallback", false);
  run.kill_on_stdout_overflow = true;  // a test whose output overflows has failed
  SandboxOptions build = run;
  build.wall_timeout_s = r.number_in("compile_timeout_s", 30, 0.1, 3600);
  build.cpu_s = std::ceil(build.wall_timeout_s) + 1;
  build.memory_bytes = r.integer("compile_memory_mb", 2048, 64, int64_t{1} << 20) << 20;
  build.max_processes = std::max(run.max_processes, 64);
  build.max_file_bytes = build.tmpfs_bytes;
  build.max_output_file_bytes = build.tmpfs_bytes;
  build.kill_on_stdout_overflow = false;
  options.stop_on_first_failure = r.boolean("stop_on_first_failure", false);
  FLYWHEEL_RETURN_IF_ERROR(r.finish());

  const std::string where = absl::StrCat("reward '", spec.name, "': ");
  options.call_timeout_s = spec.call_timeout_s;
  if (spec.call_timeout_s > 0 && options.timeout_s + kDeadlineMarginS >= spec.call_timeout_s) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "option 'timeout_s' (", options.timeout_s,
        " s per test) leaves no room within rewards.timeout_s (", spec.call_timeout_s,
        " s per call): a test that takes it would score the fallback; lower timeout_s or raise "
        "rewards.timeout_s"));
  }
  if (!options.cpp) {
    if (options.python.empty() || options.python[0] != '/' ||
        access(options.python.c_str(), X_OK) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, "option 'python' is '", options.python,
                                                     "'; must be an executable absolute path"));
    }
    // An interpreter installed outside /usr: its prefix (<prefix>/bin/python) joins the root.
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(options.python, ec);
    if (!ec && real.string().rfind("/usr/", 0) != 0) {
      run.read_only_paths.push_back(real.parent_path().parent_path().string());
    }
    options.sys_path = python_sys_path(options.python);
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
