// The `code_exec` reward: runs the solution in the last fenced code block of a completion
// against the record's tests, each run in a Sandbox, and scores the fraction that pass.
//
// Tests, record[tests_key] (default "tests"), are either a list of which each item is
//   {"input": "<stdin>", "output": "<expected stdout>"}   (compared ignoring trailing whitespace
//                                                          on each line and trailing blank lines)
//   "<python assertion code>"                             (appended to the solution; passes when
//                                                          the program exits 0)
// or {"inputs": [...], "outputs": [...]} (APPS / TACO style), or a string holding either as JSON.
// A test passes only if the program exits 0 within timeout_s without overflowing its output.
//
// Params (all optional, unknown ones are an error; see make_code_exec_reward()):
//   language               python | cpp                                      (python)
//   python                 interpreter, an absolute path                     (/usr/bin/python3)
//   cxx                    C++ compiler, a path or a name searched in PATH  (g++)
//   cxx_flags              compiler flags, split on whitespace              (-O2 -std=c++17)
//   tests_key              record key holding the tests                     (tests)
//   timeout_s              wall-clock limit per test, seconds               (5)
//   memory_mb              RLIMIT_AS per process, MiB                       (1024)
//   max_output_kb          stdout kept per test; more fails the test         (2048)
//   max_processes          processes + threads per run                      (32)
//   compile_timeout_s      wall-clock limit of the C++ compile              (30)
//   compile_memory_mb      RLIMIT_AS of the compiler processes, MiB         (2048)
//   tmpfs_mb               size of the private /tmp holding the workdir     (64)
//   stop_on_first_failure  skip the remaining tests (counted failed)        (false)
//   allow_network_fallback run where the kernel refuses namespaces           (false)
//
// Components: passed (fraction of tests passed, = score), has_code (a block was found),
// timeouts (fraction of tests that hit timeout_s), compiled (cpp only).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace flywheel::rewards {

// The body of the last fenced code block (``` or longer fences, at the start of a line, possibly
// indented) whose language tag, lower-cased, is one of `languages` ("" = no tag). A block left
// open at the end of the text does not count. nullopt when there is none.
std::optional<std::string> extract_last_code_block(absl::string_view text,
                                                   const std::vector<std::string>& languages);

// True when `actual` equals `expected` once trailing whitespace is removed from every line and
// trailing blank lines are dropped ("\r\n" and "\n" compare equal).
bool outputs_match(absl::string_view actual, absl::string_view expected);

}  // namespace flywheel::rewards
