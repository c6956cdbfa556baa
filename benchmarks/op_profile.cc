#include "op_profile.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>

namespace flywheel::bench {
namespace {

using Clock = std::chrono::steady_clock;

// RecordFunction callbacks are plain function pointers: the recording profile is found here.
std::atomic<OpProfile*> recording{nullptr};

// One open op, node or scope of a thread.
struct Frame {
  std::string name;
  at::RecordScope scope;
  Clock::time_point start;
  double children = 0;  // seconds of the ops it encloses
};
thread_local std::vector<Frame> open_frames;

struct Opened : at::ObserverContext {};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool is_matmul(const std::string& op) {
  for (const char* m :
       {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
        "aten::mv", "aten::addmv", "aten::dot", "flywheel::matmul"}) {  // small_gemm.h's kernels
    if (op == m) return true;
  }
  return false;
}

// (phase, what) of a frame that just closed, inside `outer` (innermost last).
std::pair<std::string, std::string> classify(const Frame& f, const std::vector<Frame>& outer) {
  std::string scope, node;
  auto look = [&](const Frame& g) {
    if (g.scope == at::RecordScope::USER_SCOPE && g.name.rfind("flywheel::", 0) == 0) {
      if (scope.empty()) scope = g.name;
    }
    if (g.scope == at::RecordScope::BACKWARD_FUNCTION && node.empty()) node = g.name;
  };
  look(f);
  for (auto it = outer.rbegin(); it != outer.rend(); ++it) look(*it);
  if (scope == "flywheel::optimizer") return {"optimizer", "AdamW update, gradient norm"};
  if (scope == "flywheel::collective") {
    return {"collectives", "all-gather / reduce-scatter with their dtype casts"};
  }
  const std::string phase = node.empty() ? "forward" : "backward (with recomputed forward)";
  if (is_matmul(f.name)) return {phase, "matmuls"};
  if (scope == "flywheel::head" || contains(node, "Logprob")) return {phase, "log-softmax head"};
  if (scope == "flywheel::attention" || contains(node, "Softmax") || contains(node, "MaskedFill")) {
    return {phase, "attention: softmax, mask, RoPE"};
  }
  if (scope == "flywheel::norm" || contains(node, "Rsqrt") || contains(node, "Pow") ||
      contains(node, "Mean")) {
    return {phase, "RMSNorm"};
  }
  if (f.name == "aten::to" || f.name == "aten::_to_copy" || f.name == "aten::copy_") {
    return {phase, "dtype conversions, copies"};
  }
  return {phase, "other ops"};
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (fn.isAsync()) return nullptr;
  open_frames.push_back({fn.name(), fn.scope(), Clock::now()});
  return std::make_unique<Opened>();
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (context == nullptr || open_frames.empty()) return;
  Frame f = std::move(open_frames.back());
  open_frames.pop_back();
  const double total = std::chrono::duration<double>(Clock::now() - f.start).count();
  if (!open_frames.empty()) open_frames.back().children += total;
  OpProfile* profile = recording.load();
  if (profile == nullptr) return;
  auto [phase, what] = classify(f, open_frames);
  profile->add(phase, what, f.name, total - f.children);
  (void)fn;
}

}  // namespace

OpProfile::OpProfile() : start_(Clock::now()) {
  recording.store(this);
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end));
}

OpProfile::~OpProfile() {
  at::removeCallback(handle_);
  recording.store(nullptr);
}

void OpProfile::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  seconds_.clear();
  op_seconds_.clear();
  start_ = Clock::now();
}

void OpProfile::add(const std::string& phase, const std::string& what, const std::string& op,
                    double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  seconds_[{phase, what}] += seconds;
  op_seconds_[{phase + ": " + what, op}] += seconds;
}

std::vector<OpProfile::Row> OpProfile::rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Row> out;
  double recorded = 0;
  for (const char* phase :
       {"forward", "backward (with recomputed forward)", "optimizer", "collectives"}) {
    for (const auto& [key, seconds] : seconds_) {
      if (key.first != phase) continue;
      out.push_back({key.first, key.second, seconds});
      recorded += seconds;
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start_).count();
  out.push_back({"outside ops", "MPI waits, flywheel's loops, allocation", wall - recorded});
  return out;
}

std::string OpProfile::table() const {
  const std::vector<Row> all = rows();
  double wall = 0;
  for (const Row& r : all) wall += r.seconds;
  std::string out = "| phase | what | seconds | share of the steps |\n| --- | --- | --- | --- |\n";
  char line[256];
  for (const Row& r : all) {
    std::snprintf(line, sizeof(line), "| %s | %s | %.3f | %.1f%% |\n", r.phase.c_str(),
                  r.what.c_str(), r.seconds, wall > 0 ? 100 * r.seconds / wall : 0.0);
    out += line;
  }
  // The ops (and autograd nodes) behind the phases, by their exclusive time.
  std::vector<std::pair<double, std::pair<std::string, std::string>>> ops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, seconds] : op_seconds_) ops.push_back({seconds, key});
  }
  std::sort(ops.begin(), ops.end(), std::greater<>());
  if (ops.size() > kTopOps) ops.resize(kTopOps);
  out += "\n| op (the " + std::to_string(kTopOps) +
         " longest) | phase: what | seconds | share of the steps |\n| --- | --- | --- | --- |\n";
  for (const auto& [seconds, key] : ops) {
    std::snprintf(line, sizeof(line), "| %s | %s | %.3f | %.1f%% |\n", key.second.c_str(),
                  key.first.c_str(), seconds, wall > 0 ? 100 * seconds / wall : 0.0);
    out += line;
  }
  return out;
}

}  // namespace flywheel::bench
