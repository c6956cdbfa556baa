// The Python program code_exec runs in the sandbox for assertion tests (python_tests.h), and
// how its output is read back. It holds no expected value: only the solution, the setup
// statements and the expressions to evaluate.
//
//   stdin:  16 hex digits n, then an n-byte plan of items (each 16 hex digits of length, then
//           its bytes): timeout_s, the solution's sys.path (lines; empty: the interpreter's),
//           the solution, the number of tests, and per test the number of steps and per step
//           its kind ("x" setup, "e" expression) and text; then a 32-character nonce.
//   stdout: "<nonce> <i> <result>" per test i, then "<nonce> end"; result is "ok" followed by
//           each expression's value as tokens (python_values_from_text) and a "|", or "error
//           <hex of the exception's name>", or "timeout".
// (No json module: importing it costs 10 ms, most of a bare interpreter start; the harness runs
// under -S, without the site module's 4 ms, and gives the solution the sys.path the interpreter
// has with it, found once: python_sys_path().)
//
// The harness reads the plan, makes itself undumpable (PR_SET_DUMPABLE 0: a process of the same
// user cannot then read its memory or open its descriptors through /proc) and forks. The child
// closes stdin (the nonce is still unread in it), points stdout at /dev/null and runs the
// solution, catching SystemExit, then evaluates each test's expressions and sends the tagged
// values, serialised with exact types (anything but plain data is "not plain data"), to the
// parent over a pipe. Only then does the parent read the nonce: it was never in the memory the
// child copied. It frames each result with it, kills the child at a test that runs past
// timeout_s, and ends with "end". A solution can therefore exit early (the missing results fail),
// print anything or forge result lines without the nonce (ignored), or hand back any object
// (compared by value outside the process): none of it passes a test it does not compute.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/python_tests.h"

namespace flywheel::rewards {

// The harness program (a file placed in the sandbox's working directory).
const std::string& python_harness_source();

struct HarnessPlan {
  std::string code;                        // the solution
  std::vector<std::vector<PyStep>> tests;  // the steps of each test
  double timeout_s = 5;                    // per test
  std::vector<std::string> sys_path;       // the solution's; empty: the interpreter's
};
// The harness's stdin for `plan`, ending with `nonce` (32 characters).
std::string python_harness_input(const HarnessPlan& plan, const std::string& nonce);

// sys.path of `python` -I with its site module (site-packages, .pth files): what the harness,
// which starts without it, gives the solution. Empty when it cannot be found out.
std::vector<std::string> python_sys_path(const std::string& python);

// What the harness said of each test, read from its stdout: only lines with `nonce` count.
struct HarnessResult {
  enum class Kind { kMissing, kValues, kError, kTimeout };
  Kind kind = Kind::kMissing;
  std::vector<PyValue> values;  // kValues: one per check of the test
  std::string error;            // kError: the exception's name, or why a value was rejected
};
std::vector<HarnessResult> read_harness_output(const std::string& stdout_data,
                                               const std::string& nonce, size_t num_tests);

// A fresh random 32-character nonce.
std::string make_nonce();

}  // namespace flywheel::rewards
