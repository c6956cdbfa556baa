// ControllerCore::snapshot() / restore(): the controller's whole state as JSON.
#include <algorithm>
#include <limits>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flywheel/buffer/controller_core.h"
#include "flywheel/core/json.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::buffer {
namespace {

using core::Json;

template <typename T>
Json numbers(const std::vector<T>& values) {
  Json a = Json::array();
  for (T v : values)
    a.push_back(
        Json(static_cast<std::conditional_t<std::is_floating_point_v<T>, double, int64_t>>(v)));
  return a;
}

Json trajectory_json(const Trajectory& t) {
  Json j = Json::object();
  j.set("prompt_ids", numbers(t.prompt_ids));
  j.set("response_ids", numbers(t.response_ids));
  std::vector<int64_t> mask(t.loss_mask.begin(), t.loss_mask.end());
  j.set("loss_mask", numbers(mask));
  j.set("logprobs", numbers(t.logprobs));
  j.set("versions", numbers(t.versions));
  j.set("reward", Json(t.reward));
  Json breakdown = Json::object();
  for (const auto& [k, v] : t.reward_breakdown) breakdown.set(k, Json(v));
  j.set("reward_breakdown", std::move(breakdown));
  j.set("finish_reason", Json(t.finish_reason));
  j.set("sample_index", Json(t.sample_index));
  if (!t.turn_ends.empty()) {  // an episode's; single-turn snapshots stay as they were
    j.set("turn_ends", numbers(t.turn_ends));
    j.set("turn_rewards", numbers(t.turn_rewards));
    j.set("tool_calls", Json(static_cast<int64_t>(t.tool_calls)));
    j.set("env_step_seconds", numbers(t.env_step_seconds));
  }
  if (t.segment != 0) j.set("segment", Json(static_cast<int64_t>(t.segment)));
  if (!t.step_ends.empty()) {  // process rewards
    j.set("step_ends", numbers(t.step_ends));
    j.set("step_rewards", numbers(t.step_rewards));
  }
  if (!t.routes.empty()) {  // a mixture-of-experts model's expert routes
    j.set("routes", numbers(t.routes));
    j.set("route_layers", Json(static_cast<int64_t>(t.route_layers)));
    j.set("route_k", Json(static_cast<int64_t>(t.route_k)));
    j.set("route_bytes", Json(static_cast<int64_t>(t.route_bytes)));
  }
  return j;
}

Json partial_sample_json(const PartialSample& s) {
  Json j = Json::object();
  j.set("token_ids", numbers(s.token_ids));
  j.set("logprobs", numbers(s.logprobs));
  j.set("versions", numbers(s.versions));
  j.set("finished", Json(s.finished));
  j.set("finish_reason", Json(s.finish_reason));
  return j;
}

// Readers that fail soft: a malformed snapshot is reported once, at the end.
struct Reader {
  bool ok = true;
  int64_t integer(const Json* j) {
    if (!j || !j->is_integer()) ok = false;
    return ok ? j->as_int() : 0;
  }
  int32_t int32(const Json* j) {
    const int64_t x = integer(j);
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
      ok = false;
    }
    return static_cast<int32_t>(x);
  }
  double number(const Json* j) {
    if (!j || !j->is_number()) ok = false;
    return ok ? j->as_double() : 0;
  }
  std::string string(const Json* j) {
    if (!j || !j->is_string()) ok = false;
    return ok ? j->as_string() : "";
  }
  template <typename T>
  std::vector<T> list(const Json* j) {
    std::vector<T> out;
    if (!j || !j->is_array()) {
      ok = false;
      return out;
    }
    for (const Json& v : j->as_array()) {
      if constexpr (std::is_floating_point_v<T>) {
        out.push_back(static_cast<T>(number(&v)));
      } else {
        const int64_t x = integer(&v);
        if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) ok = false;
        out.push_back(static_cast<T>(x));
      }
    }
    return out;
  }
  PartialSample partial_sample(const Json& j) {
    PartialSample s;
    s.token_ids = list<int32_t>(j.find("token_ids"));
    s.logprobs = list<float>(j.find("logprobs"));
    s.versions = list<int32_t>(j.find("versions"));
    const Json* finished = j.find("finished");
    if (!finished || !finished->is_bool()) ok = false;
    s.finished = ok && finished->as_bool();
    s.finish_reason = string(j.find("finish_reason"));
    return s;
  }
  Trajectory trajectory(const Json& j) {
    Trajectory t;
    t.prompt_ids = list<int32_t>(j.find("prompt_ids"));
    t.response_ids = list<int32_t>(j.find("response_ids"));
    t.loss_mask = list<uint8_t>(j.find("loss_mask"));
    t.logprobs = list<float>(j.find("logprobs"));
    t.versions = list<int32_t>(j.find("versions"));
    t.reward = number(j.find("reward"));
    if (const Json* b = j.find("reward_breakdown"); b && b->is_object()) {
      for (const auto& [k, v] : b->as_object()) t.reward_breakdown[k] = number(&v);
    }
    t.finish_reason = string(j.find("finish_reason"));
    t.sample_index = integer(j.find("sample_index"));
    if (j.find("turn_ends") != nullptr) {
      t.turn_ends = list<int32_t>(j.find("turn_ends"));
      t.turn_rewards = list<double>(j.find("turn_rewards"));
      t.tool_calls = static_cast<int32_t>(integer(j.find("tool_calls")));
      t.env_step_seconds = list<float>(j.find("env_step_seconds"));
    }
    if (j.find("segment") != nullptr) {
      const int64_t segment = integer(j.find("segment"));
      if (segment < 0 || segment > std::numeric_limits<int32_t>::max()) ok = false;
      t.segment = static_cast<int32_t>(segment);
    }
    if (j.find("step_ends") != nullptr) {
      t.step_ends = list<int32_t>(j.find("step_ends"));
      t.step_rewards = list<double>(j.find("step_rewards"));
    }
    if (j.find("routes") != nullptr) {
      t.routes = list<uint8_t>(j.find("routes"));
      t.route_layers = int32(j.find("route_layers"));
      t.route_k = int32(j.find("route_k"));
      t.route_bytes = int32(j.find("route_bytes"));
    }
    return t;
  }
};

std::string fingerprint_hex(uint64_t fingerprint) {
  return absl::StrCat(absl::Hex(fingerprint, absl::kZeroPad16));
}

// InvalidArgument naming the first setting of `j` ("dataset" / "shape" objects) that differs
// from what this controller was configured with.
absl::Status check_identity(const Json& j, const ControllerOptions& o) {
  const Json* dataset = j.find("dataset");
  const Json* shape = j.find("shape");
  if (!dataset || !dataset->is_object() || !shape || !shape->is_object()) {
    return absl::InvalidArgumentError(
        "controller snapshot: no dataset identity or group shape recorded (made by an older "
        "flywheel?); refusing to restore it over an unknown dataset");
  }
  struct Setting {
    const Json* recorded;
    std::string name, expected;
  };
  auto text = [](const Json* v) -> std::string {
    if (v == nullptr) return "(missing)";
    if (v->is_string()) return v->as_string();
    return v->dump();
  };
  const Setting settings[] = {
      {dataset->find("prompts"), "dataset size (prompts)", Json(o.num_prompts).dump()},
      {dataset->find("fingerprint"), "dataset content fingerprint",
       fingerprint_hex(o.dataset_fingerprint)},
      {dataset->find("seed"), "data.seed", Json(static_cast<int64_t>(o.seed)).dump()},
      {dataset->find("shuffle"), "data.shuffle", Json(o.shuffle).dump()},
      {shape->find("group_size"), "group size", Json(o.limits.group_size).dump()},
      {shape->find("vocab_size"), "vocabulary size", Json(o.limits.vocab_size).dump()},
  };
  for (const Setting& s : settings) {
    if (text(s.recorded) != s.expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("controller snapshot was made for another run: its ", s.name, " is ",
                       text(s.recorded), ", this controller's is ", s.expected));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ControllerCore::snapshot() const {
  absl::MutexLock lock(&mu_);
  Json j = Json::object();
  j.set("format", Json("flywheel.controller.v1"));
  Json dataset = Json::object();
  dataset.set("prompts", Json(options_.num_prompts));
  dataset.set("fingerprint", Json(fingerprint_hex(options_.dataset_fingerprint)));
  dataset.set("seed", Json(static_cast<int64_t>(options_.seed)));
  dataset.set("shuffle", Json(options_.shuffle));
  j.set("dataset", std::move(dataset));
  Json shape = Json::object();
  shape.set("group_size", Json(options_.limits.group_size));
  shape.set("vocab_size", Json(options_.limits.vocab_size));
  j.set("shape", std::move(shape));
  j.set("version", Json(version_));
  j.set("epoch", Json(epoch_));
  j.set("cursor", Json(cursor_));
  j.set("next_lease_id", Json(static_cast<int64_t>(next_lease_id_)));
  Json requeued = Json::array();
  for (const auto& [epoch, prompt] : requeued_)
    requeued.push_back(Json::array({Json(epoch), Json(prompt)}));
  j.set("requeued", std::move(requeued));
  Json partials = Json::array();
  for (const auto& [key, partial] : partials_) {
    Json p = Json::object();
    p.set("epoch", Json(key.first));
    p.set("prompt", Json(key.second));
    Json samples = Json::array();
    for (const PartialSample& sample : *partial) samples.push_back(partial_sample_json(sample));
    p.set("samples", std::move(samples));
    partials.push_back(std::move(p));
  }
  j.set("partials", std::move(partials));
  Json leases = Json::array();
  for (const auto& [id, lease] : leases_) {
    Json l = Json::object();
    l.set("id", Json(static_cast<int64_t>(id)));
    l.set("epoch", Json(lease.epoch));
    l.set("prompt", Json(lease.prompt));
    l.set("worker", Json(lease.worker));
    l.set("grant_version", Json(lease.grant_version));
    leases.push_back(std::move(l));
  }
  j.set("leases", std::move(leases));
  Json buffer = Json::array();
  for (const Entry& e : buffer_) {
    Json g = Json::object();
    g.set("group_id", Json(e.group.group_id));
    g.set("lease_id", Json(static_cast<int64_t>(e.group.lease_id)));
    g.set("worker_id", Json(e.group.worker_id));
    if (e.group.prompt_index >= 0) g.set("prompt_index", Json(e.group.prompt_index));
    if (e.group.has_baseline) g.set("baseline_reward", Json(e.group.baseline_reward));
    if (e.group.env_errors > 0) g.set("env_errors", Json(e.group.env_errors));
    g.set("epoch", Json(e.epoch));
    g.set("grant_version", Json(e.grant_version));
    g.set("prompt", Json(e.prompt));
    Json ts = Json::array();
    for (const Trajectory& t : e.group.trajectories) ts.push_back(trajectory_json(t));
    g.set("trajectories", std::move(ts));
    buffer.push_back(std::move(g));
  }
  j.set("buffer", std::move(buffer));
  Json acked = Json::array();
  for (const std::string& id : acknowledged_.in_order()) acked.push_back(Json(id));
  j.set("acknowledged", std::move(acked));
  Json counters = Json::object();
  for (const auto& [name, value] : counters_.entries()) counters.set(name, Json(value));
  j.set("counters", std::move(counters));
  return j.dump();
}

absl::StatusOr<std::unique_ptr<ControllerCore>> ControllerCore::restore(
    const ControllerOptions& options, const std::string& text, double now, Filter filter) {
  absl::StatusOr<std::unique_ptr<ControllerCore>> created = create(options, std::move(filter));
  if (!created.ok()) return created.status();
  absl::StatusOr<Json> parsed = Json::parse(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("controller snapshot: ", parsed.status().message()));
  }
  const Json& j = *parsed;
  if (const Json* f = j.find("format");
      !f || !f->is_string() || f->as_string() != "flywheel.controller.v1") {
    return absl::InvalidArgumentError(
        "controller snapshot: unknown format (expected flywheel.controller.v1)");
  }
  FLYWHEEL_RETURN_IF_ERROR(check_identity(j, options));
  ControllerCore& c = **created;
  Reader r;
  auto malformed = [](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("controller snapshot: ", why));
  };
  auto array = [&](const char* name) -> const std::vector<Json>* {
    const Json* a = j.find(name);
    return a != nullptr && a->is_array() ? &a->as_array() : nullptr;
  };
  const std::vector<Json>* requeued = array("requeued");
  const std::vector<Json>* leases = array("leases");
  const std::vector<Json>* buffer = array("buffer");
  const std::vector<Json>* acknowledged = array("acknowledged");
  const Json* counters = j.find("counters");
  if (!requeued || !leases || !buffer || !acknowledged || !counters || !counters->is_object()) {
    return malformed(
        "needs the arrays requeued, leases, buffer, acknowledged and a counters object");
  }
  absl::MutexLock lock(&c.mu_);
  c.version_ = r.integer(j.find("version"));
  c.epoch_ = r.integer(j.find("epoch"));
  c.cursor_ = r.integer(j.find("cursor"));
  const int64_t next_lease_id = r.integer(j.find("next_lease_id"));
  // A start with an incarnation grants ids of its own (set by the constructor); without one
  // it continues the snapshot's count.
  if (options.incarnation == 0) c.next_lease_id_ = static_cast<uint64_t>(next_lease_id);
  for (const Json& pair : *requeued) {
    std::vector<int64_t> v = r.list<int64_t>(&pair);
    if (v.size() != 2) return malformed("requeued entries must be [epoch, prompt] pairs");
    c.requeued_.emplace_back(v[0], v[1]);
  }
  // Partial generations of requeued prompts (absent from snapshots older than them).
  if (const std::vector<Json>* partials = array("partials")) {
    for (const Json& p : *partials) {
      const int64_t epoch = r.integer(p.find("epoch")), prompt = r.integer(p.find("prompt"));
      const Json* samples = p.find("samples");
      if (!samples || !samples->is_array()) return malformed("partials need their samples");
      PartialGeneration partial;
      for (const Json& sample : samples->as_array()) partial.push_back(r.partial_sample(sample));
      if (!r.ok) break;
      const absl::Status valid = validate_partial(partial, options.limits, c.version_);
      if (!valid.ok()) return malformed(absl::StrCat("partials: ", valid.message()));
      c.partials_[{epoch, prompt}] = std::make_shared<const PartialGeneration>(std::move(partial));
    }
  }
  for (const Json& l : *leases) {
    Lease lease;
    const int64_t id = r.integer(l.find("id"));
    lease.id = static_cast<uint64_t>(id);
    lease.epoch = r.integer(l.find("epoch"));
    lease.prompt = r.integer(l.find("prompt"));
    lease.worker = r.string(l.find("worker"));
    // Snapshots from before grant versions were kept: the version they were made at.
    const Json* granted = l.find("grant_version");
    lease.grant_version = granted != nullptr ? r.integer(granted) : c.version_;
    lease.deadline = now + options.lease_timeout_s;  // deadlines restart with the controller
    if (id < 1 || id >= next_lease_id) {
      return malformed(
          absl::StrCat("lease id ", id, " is outside [1, next_lease_id ", next_lease_id, ")"));
    }
    if (c.leases_.count(lease.id)) return malformed(absl::StrCat("lease id ", id, " twice"));
    if (options.incarnation != 0 && (lease.id >> 32) == options.incarnation) {
      return absl::InvalidArgumentError(
          absl::StrCat("controller snapshot: lease id ", id, " belongs to incarnation ",
                       options.incarnation, " itself; start with another incarnation"));
    }
    c.last_seen_[lease.worker] = now;
    c.add_lease_locked(lease);
  }
  for (const Json& g : *buffer) {
    Entry e;
    e.group.group_id = r.string(g.find("group_id"));
    e.group.lease_id = static_cast<uint64_t>(r.integer(g.find("lease_id")));
    e.group.worker_id = r.string(g.find("worker_id"));
    if (const Json* p = g.find("prompt_index"); p != nullptr) e.group.prompt_index = r.integer(p);
    if (const Json* n = g.find("env_errors"); n != nullptr) e.group.env_errors = r.integer(n);
    if (const Json* b = g.find("baseline_reward"); b != nullptr) {
      e.group.has_baseline = true;
      e.group.baseline_reward = r.number(b);
    }
    e.epoch = r.integer(g.find("epoch"));
    e.prompt = r.integer(g.find("prompt"));
    const Json* ts = g.find("trajectories");
    if (ts == nullptr || !ts->is_array()) return malformed("a buffered group has no trajectories");
    for (const Json& t : ts->as_array()) e.group.trajectories.push_back(r.trajectory(t));
    if (!r.ok) break;
    // Buffered groups go to the learner as they are: they must pass today's validation.
    if (absl::Status valid = validate_group(e.group, options.limits, c.version_); !valid.ok()) {
      return malformed(absl::StrCat("buffered group ", c.buffer_.size(), " ('", e.group.group_id,
                                    "'): ", valid.message()));
    }
    e.min_version = e.group.min_version();
    const Json* granted = g.find("grant_version");
    e.grant_version = granted != nullptr ? r.integer(granted) : std::min(e.min_version, c.version_);
    e.bytes = static_cast<int64_t>(e.group.bytes());
    c.buffered_bytes_ += e.bytes;
    c.buffer_.push_back(std::move(e));
  }
  for (const Json& id : *acknowledged) c.acknowledged_.insert(r.string(&id));
  for (auto& [name, field] : c.counters_.fields()) {
    const Json* value = counters->find(name);
    // Snapshots older than these counters.
    if (value == nullptr &&
        (name == "dropped" || absl::StartsWith(name, "partials_") || name == "resumed_tokens")) {
      continue;
    }
    *field = r.integer(value);
  }
  if (!r.ok) return malformed("a field is missing or has the wrong type");
  // Every prompt reference must point into this dataset and its epochs (a snapshot of another
  // run must not make the server index out of range later).
  auto in_range = [&](int64_t epoch, int64_t prompt) {
    return epoch >= 0 && epoch < options.epochs && prompt >= 0 && prompt < options.num_prompts;
  };
  bool refs_ok = true;
  for (const auto& [epoch, prompt] : c.requeued_) refs_ok = refs_ok && in_range(epoch, prompt);
  for (const auto& [key, partial] : c.partials_) {
    refs_ok = refs_ok && in_range(key.first, key.second);
  }
  for (const auto& [id, lease] : c.leases_)
    refs_ok = refs_ok && in_range(lease.epoch, lease.prompt);
  for (const Entry& e : c.buffer_) refs_ok = refs_ok && in_range(e.epoch, e.prompt);
  if (!refs_ok || c.epoch_ < 0 || c.epoch_ > options.epochs || c.cursor_ < 0 ||
      c.cursor_ >= options.num_prompts || c.version_ < 0) {
    return malformed(
        absl::StrCat("a prompt reference, the cursor or the version is out of range for ",
                     options.num_prompts, " prompts and ", options.epochs, " epoch(s)"));
  }
  return created;
}

}  // namespace flywheel::buffer
