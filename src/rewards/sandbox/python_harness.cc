#include "sandbox/python_harness.h"

#include <cstdio>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace flywheel::rewards {

const std::string& python_harness_source() {
  static const std::string kSource =
      R"PY(# flywheel code_exec harness (python_harness.h): holds no expected value.
import os, select, time  # not signal: it imports enum (6 ms)

def read_exact(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            os._exit(3)
        data += chunk
    return data

def items(data):
    pos = 0
    while pos < len(data):
        n = int(data[pos:pos + 16], 16)
        yield data[pos + 16:pos + 16 + n]
        pos += 16 + n

def dump(v, out, depth=0):
    if depth > 100:
        raise ValueError("nested too deeply")
    t = type(v)
    if v is None:
        out.append("n")
    elif t is bool:
        out.append("T" if v else "F")
    elif t is int:
        out.append("i" + int.__repr__(v))
    elif t is float:
        out.append("f" + float.hex(v))
    elif t is str:
        out.append("s" + str.encode(v, "utf-8", "surrogatepass").hex())
    elif t is bytes:
        out.append("y" + bytes.hex(v))
    elif t is list or t is tuple or t is set or t is frozenset:
        out.append(("L" if t is list else "U" if t is tuple else "S" if t is set else "Z") +
                   str(len(v)))
        for x in v:
            dump(x, out, depth + 1)
    elif t is dict:
        out.append("D" + str(len(v)))
        for k, x in dict.items(v):
            dump(k, out, depth + 1)
            dump(x, out, depth + 1)
    else:
        out.append("?" + str(getattr(t, "__name__", "?")).encode("utf-8", "replace")[:100].hex())

def undumpable():
    # PR_SET_DUMPABLE 0, checked with PR_GET_DUMPABLE; _ctypes alone costs 0.5 ms, ctypes 3 ms.
    try:
        import _ctypes
        prctl = _ctypes.dlsym(_ctypes.dlopen(None, 2), "prctl")
        call = lambda *a: _ctypes.call_function(prctl, a)
    except (ImportError, AttributeError, OSError):
        import ctypes
        call = ctypes.CDLL(None).prctl
    return call(4, 0, 0, 0, 0) == 0 and call(3, 0, 0, 0, 0) == 0

def send(fd, data):
    while data:
        data = data[os.write(fd, data):]

def child(code, tests, path, w):
    if path:
        import sys
        sys.path[:] = path
    nul = os.open("/dev/null", os.O_RDWR)
    os.dup2(nul, 0)
    os.dup2(nul, 1)
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(code, g)  # from a str: the first compile() of a process costs 1.5-2.5 ms
    except BaseException:
        pass  # SystemExit included: the tests run against what was defined
    for i, steps in enumerate(tests):
        try:
            values = []
            for kind, text in steps:
                if kind == "x":
                    exec(text, g)
                else:
                    dump(eval(text, g), values)
                    values.append("|")
            line = "ok " + " ".join(values)
        except BaseException as e:
            line = "error " + str(type(e).__name__).encode("utf-8", "replace")[:100].hex()
        send(w, ("%d %s\n" % (i, line)).encode("ascii", "replace"))
    os._exit(0)

def main():
    plan = list(items(read_exact(int(read_exact(16), 16))))
    timeout = float(plan[0])
    path = [p for p in plan[1].decode("utf-8", "surrogateescape").split("\n") if p]
    code = plan[2].decode("utf-8", "surrogateescape")
    tests, pos = [], 4
    for _ in range(int(plan[3])):
        steps = []
        for _ in range(int(plan[pos])):
            steps.append((plan[pos + 1].decode("ascii"), plan[pos + 2].decode("utf-8", "surrogateescape")))
            pos += 2
        pos += 1
        tests.append(steps)
    if not undumpable():
        os._exit(4)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child(code, tests, path, w)
    os.close(w)
    nonce = read_exact(32).decode("ascii")  # after the fork: never in the child's memory
    os.close(0)
    def write(text):
        send(1, text.encode("ascii", "replace"))
    buf = b""
    done = 0
    deadline = time.monotonic() + timeout
    while done < len(tests):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([r], [], [], left)[0]:
            write("%s %d timeout\n" % (nonce, done))
            break
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break  # the child ended before every test: the rest are missing
        buf += chunk
        while b"\n" in buf and done < len(tests):
            line, buf = buf.split(b"\n", 1)
            index, _, payload = line.partition(b" ")
            if index != str(done).encode("ascii"):
                done = len(tests)
                break
            write("%s %d %s\n" % (nonce, done, payload.decode("ascii", "replace")))
            done += 1
            deadline = time.monotonic() + timeout
        if len(buf) > (8 << 20):
            break
    try:
        os.kill(pid, 9)  # SIGKILL
    except OSError:
        pass
    os.waitpid(pid, 0)
    write("%s end\n" % nonce)
    os._exit(0)

main()
)PY";
  return kSource;
}

namespace {

void append_item(std::string* out, absl::string_view item) {
  absl::StrAppend(out, absl::StrFormat("%016x", item.size()), item);
}

}  // namespace

std::string python_harness_input(const HarnessPlan& input, const std::string& nonce) {
  std::string plan;
  append_item(&plan, absl::StrFormat("%.6f", input.timeout_s));
  append_item(&plan, absl::StrJoin(input.sys_path, "\n"));
  append_item(&plan, input.code);
  append_item(&plan, absl::StrCat(input.tests.size()));
  for (const std::vector<PyStep>& test : input.tests) {
    append_item(&plan, absl::StrCat(test.size()));
    for (const PyStep& step : test) {
      append_item(&plan, step.is_check ? "e" : "x");
      append_item(&plan, step.is_check ? step.check.expression : step.code);
    }
  }
  return absl::StrCat(absl::StrFormat("%016x", plan.size()), plan, nonce);
}

std::vector<HarnessResult> read_harness_output(const std::string& stdout_data,
                                               const std::string& nonce, size_t num_tests) {
  std::vector<HarnessResult> out(num_tests);
  const std::string prefix = nonce + " ";
  for (absl::string_view line : absl::StrSplit(stdout_data, '\n')) {
    if (!absl::ConsumePrefix(&line, prefix)) continue;  // not the harness's
    std::pair<absl::string_view, absl::string_view> parts =
        absl::StrSplit(line, absl::MaxSplits(' ', 1));
    size_t index = 0;
    if (!absl::SimpleAtoi(parts.first, &index) || index >= num_tests ||
        out[index].kind != HarnessResult::Kind::kMissing) {
      continue;
    }
    HarnessResult& r = out[index];
    if (parts.second == "timeout") {
      r.kind = HarnessResult::Kind::kTimeout;
      continue;
    }
    absl::string_view payload = parts.second;
    if (absl::ConsumePrefix(&payload, "error ")) {
      r.kind = HarnessResult::Kind::kError;
      r.error = absl::HexStringToBytes(payload.substr(0, payload.size() & ~size_t{1}));
      continue;
    }
    if (!absl::ConsumePrefix(&payload, "ok")) {
      r.kind = HarnessResult::Kind::kError;
      r.error = "a malformed result";
      continue;
    }
    // "ok v1... | v2... |": each check's value ends with a "|" token.
    r.kind = HarnessResult::Kind::kValues;
    for (absl::string_view part :
         absl::StrSplit(absl::StripLeadingAsciiWhitespace(payload), "|", absl::SkipWhitespace())) {
      absl::StatusOr<std::vector<PyValue>> value =
          python_values_from_text(absl::StripAsciiWhitespace(part), 1);
      if (!value.ok()) {
        r.kind = HarnessResult::Kind::kError;
        r.error = std::string(value.status().message());
        r.values.clear();
        break;
      }
      r.values.push_back(std::move((*value)[0]));
    }
  }
  return out;
}

std::vector<std::string> python_sys_path(const std::string& python) {
  std::vector<std::string> out;
  const std::string command = absl::StrCat(
      "'", python, "' -I -B -c 'import sys; print(\"\\n\".join(sys.path))' 2>/dev/null");
  if (python.find('\'') != std::string::npos) return out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::string text;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) text.append(buffer, n);
  if (pclose(pipe) != 0) return {};
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    out.emplace_back(line);
  }
  return out;
}

std::string make_nonce() {
  std::random_device device;
  std::string out;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&out, absl::StrFormat("%08x", static_cast<uint32_t>(device())));
  }
  return out;
}

}  // namespace flywheel::rewards
