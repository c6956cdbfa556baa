#include "flywheel/buffer/controller_core.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/core/json.h"
#include "flywheel/core/logging.h"
#include "flywheel/core/status_macros.h"

namespace flywheel::buffer {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* push_outcome_name(PushOutcome outcome) {
  switch (outcome) {
    case PushOutcome::kAccepted:
      return "accepted";
    case PushOutcome::kDuplicate:
      return "duplicate";
    case PushOutcome::kFiltered:
      return "filtered";
    case PushOutcome::kStaleDropped:
      return "stale_dropped";
    case PushOutcome::kStaleRequeued:
      return "stale_requeued";
  }
  return "?";
}

std::vector<std::pair<std::string, int64_t*>> ControllerCounters::fields() {
  return {{"granted", &granted},
          {"expired", &expired},
          {"released", &released},
          {"accepted", &accepted},
          {"duplicates", &duplicates},
          {"filtered", &filtered},
          {"stale_dropped", &stale_dropped},
          {"stale_requeued", &stale_requeued},
          {"rejected_invalid", &rejected_invalid},
          {"rejected_lease", &rejected_lease},
          {"rejected_full", &rejected_full},
          {"consumed", &consumed},
          {"dropped", &dropped},
          {"partials_returned", &partials_returned},
          {"partials_resumed", &partials_resumed},
          {"partials_discarded", &partials_discarded},
          {"resumed_tokens", &resumed_tokens}};
}

std::vector<std::pair<std::string, int64_t>> ControllerCounters::entries() const {
  ControllerCounters copy = *this;
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [name, value] : copy.fields()) out.emplace_back(name, *value);
  return out;
}

absl::Status ControllerOptions::validate() const {
  if (num_prompts < 1) return absl::InvalidArgumentError("controller needs at least one prompt");
  if (epochs < 1) return absl::InvalidArgumentError("epochs must be >= 1");
  if (groups_per_step < 1) return absl::InvalidArgumentError("groups_per_step must be >= 1");
  if (max_staleness < 0) return absl::InvalidArgumentError("max_staleness must be >= 0");
  if (capacity_groups < groups_per_step) {
    return absl::InvalidArgumentError("capacity_groups must hold at least one step's groups");
  }
  if (capacity_bytes < 1) return absl::InvalidArgumentError("capacity_bytes must be >= 1");
  if (!(lease_timeout_s > 0) || !(worker_timeout_s > 0)) {
    return absl::InvalidArgumentError("lease and worker timeouts must be > 0");
  }
  if (limits.vocab_size < 1 || limits.group_size < 1) {
    return absl::InvalidArgumentError("validation limits need vocab_size and group_size");
  }
  if (remembered_group_ids < 0) {
    return absl::InvalidArgumentError("remembered_group_ids must be >= 0");
  }
  if (incarnation >= (uint32_t{1} << 31)) {
    return absl::InvalidArgumentError("incarnation must be < 2^31");
  }
  if (max_groups < 0) return absl::InvalidArgumentError("max_groups must be >= 0");
  return absl::OkStatus();
}

uint32_t make_incarnation() {
  std::random_device device;
  std::uniform_int_distribution<uint32_t> pick(1, (uint32_t{1} << 31) - 1);
  return pick(device);
}

ControllerCore::ControllerCore(const ControllerOptions& options, Filter filter)
    : options_(options),
      filter_(std::move(filter)),
      next_lease_id_((static_cast<uint64_t>(options.incarnation) << 32) + 1),
      acknowledged_(static_cast<size_t>(options.remembered_group_ids)) {}

absl::StatusOr<std::unique_ptr<ControllerCore>> ControllerCore::create(
    const ControllerOptions& options, Filter filter) {
  FLYWHEEL_RETURN_IF_ERROR(options.validate());
  return std::unique_ptr<ControllerCore>(new ControllerCore(options, std::move(filter)));
}

const std::vector<int64_t>& ControllerCore::order_locked(int64_t epoch) {
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  std::vector<int64_t> order(options_.num_prompts);
  for (int64_t i = 0; i < options_.num_prompts; ++i) order[i] = i;
  if (options_.shuffle) {
    std::mt19937_64 rng(options_.seed * 1000003 + static_cast<uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), rng);
  }
  return orders_.emplace(epoch, std::move(order)).first->second;
}

bool ControllerCore::peek_prompt_locked(int64_t* epoch, int64_t* prompt) {
  if (!requeued_.empty()) {
    std::tie(*epoch, *prompt) = requeued_.front();
    return true;
  }
  if (epoch_ >= options_.epochs) return false;
  *epoch = epoch_;
  *prompt = order_locked(epoch_)[cursor_];
  return true;
}

void ControllerCore::pop_prompt_locked() {
  if (!requeued_.empty()) {
    requeued_.pop_front();
    return;
  }
  if (++cursor_ == options_.num_prompts) {
    orders_.erase(epoch_);  // the order of a finished epoch is no longer needed
    ++epoch_;
    cursor_ = 0;
  }
}

void ControllerCore::requeue_locked(int64_t epoch, int64_t prompt) {
  requeued_.emplace_back(epoch, prompt);
}

void ControllerCore::close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool ControllerCore::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

bool ControllerCore::heartbeat_done(const std::string& worker, double now) {
  absl::MutexLock lock(&mu_);
  seen_locked(worker, now);
  if (closed_) told_done_.insert(worker);
  return closed_;
}

bool ControllerCore::settled(double now) const {
  absl::MutexLock lock(&mu_);
  if (!closed_ || !leases_.empty()) return false;
  for (const auto& [worker, seen] : last_seen_) {
    if (now - seen <= options_.worker_timeout_s && !told_done_.count(worker)) return false;
  }
  return true;
}

std::string ControllerCore::workers_heard(double now) const {
  absl::MutexLock lock(&mu_);
  if (last_seen_.empty()) return "no rollout worker has registered";
  std::string out = "workers last heard from: ";
  bool first = true;
  for (const auto& [worker, seen] : last_seen_) {
    absl::StrAppendFormat(&out, "%s%s %.1f s ago", first ? "" : ", ", worker, now - seen);
    first = false;
  }
  return out;
}

bool ControllerCore::drained() const {
  absl::MutexLock lock(&mu_);
  return epoch_ >= options_.epochs && requeued_.empty() && leases_.empty();
}

int64_t ControllerCore::budget_limit() const {
  absl::MutexLock lock(&mu_);
  return (options_.max_staleness + grant_version_locked() + 1) * options_.groups_per_step;
}

Grant ControllerCore::acquire(const std::string& worker, int64_t max_prompts, double now,
                              const GrantBudget* budget) {
  absl::MutexLock lock(&mu_);
  seen_locked(worker, now);
  expire_locked(now);
  Grant grant;
  grant.version = grant_version_locked();
  if (closed_) {
    grant.kind = Grant::Kind::kDone;
    told_done_.insert(worker);
    return grant;
  }
  if (options_.max_groups > 0 && counters_.consumed >= options_.max_groups) {
    grant.kind = Grant::Kind::kDone;  // every group the run trains on is taken
    told_done_.insert(worker);
    return grant;
  }
  int64_t limit = (options_.max_staleness + grant.version + 1) * options_.groups_per_step;
  if (options_.max_groups > 0) limit = std::min(limit, options_.max_groups);
  const int64_t used = static_cast<int64_t>(leases_.size() + buffer_.size()) + counters_.consumed;
  const bool exhausted = epoch_ >= options_.epochs && requeued_.empty();
  if (exhausted) {
    // With requeue_stale a buffered group can still go stale and send its prompt back.
    const bool settled = leases_.empty() && (!options_.requeue_stale || buffer_.empty());
    grant.kind = settled ? Grant::Kind::kDone : Grant::Kind::kWait;
    if (settled) told_done_.insert(worker);
    return grant;
  }
  const int64_t room = std::min(max_prompts, limit - used);
  int64_t spent = 0;
  for (int64_t i = 0; i < room; ++i) {
    Lease lease;
    if (!peek_prompt_locked(&lease.epoch, &lease.prompt)) break;
    auto partial = partials_.find({lease.epoch, lease.prompt});
    const bool fresh_enough =
        partial != partials_.end() &&
        grant.version - min_version(*partial->second) <= options_.max_staleness;
    if (fresh_enough) lease.partial = partial->second;
    if (budget != nullptr) {
      const int64_t cost = budget->cost(lease.prompt) +
                           (lease.partial ? static_cast<int64_t>(byte_size(*lease.partial)) : 0);
      if (spent + cost > budget->max_cost) break;
      spent += cost;
    }
    pop_prompt_locked();
    if (partial != partials_.end()) {
      if (fresh_enough) {
        ++counters_.partials_resumed;
        counters_.resumed_tokens += token_count(*partial->second);
      } else {
        ++counters_.partials_discarded;
      }
      partials_.erase(partial);
    }
    lease.id = next_lease_id_++;
    lease.worker = worker;
    lease.deadline = now + options_.lease_timeout_s;
    lease.grant_version = grant.version;
    add_lease_locked(lease);
    grant.leases.push_back(lease);
    ++counters_.granted;
  }
  grant.kind = grant.leases.empty() ? Grant::Kind::kWait : Grant::Kind::kWork;
  return grant;
}

absl::StatusOr<PushOutcome> ControllerCore::push(TrajectoryGroup&& group, double now) {
  // The version only grows, so a group valid against this one is valid against the current.
  absl::Status valid = validate_group(group, options_.limits, version());
  absl::StatusOr<std::vector<double>> filtered_on = std::vector<double>();
  if (filter_ && valid.ok()) {
    filtered_on = group.rewards(options_.filter_metric);
    valid = filtered_on.status();
  }
  const int64_t min_version = group.min_version();
  const int64_t bytes = static_cast<int64_t>(group.bytes());
  absl::MutexLock lock(&mu_);
  seen_locked(group.worker_id, now);
  if (acknowledged_.contains(group.group_id)) {
    ++counters_.duplicates;
    return PushOutcome::kDuplicate;
  }
  expire_locked(now);
  auto it = leases_.find(group.lease_id);
  if (it == leases_.end()) {
    ++counters_.rejected_lease;
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", group.lease_id, " is unknown or expired; its prompt was re-issued"));
  }
  if (!valid.ok()) {
    ++counters_.rejected_invalid;
    return valid;
  }
  const Lease lease = it->second;
  if (lease.worker != group.worker_id ||
      (group.prompt_index != -1 && group.prompt_index != lease.prompt)) {
    ++counters_.rejected_lease;
    return absl::FailedPreconditionError(absl::StrCat(
        "lease ", lease.id, " was granted to worker '", lease.worker, "' for prompt ", lease.prompt,
        ", not to '", group.worker_id, "' for prompt ", group.prompt_index));
  }
  if (min_version < version_ - options_.max_staleness) {
    remove_lease_locked(lease.id);
    acknowledged_.insert(group.group_id);
    if (options_.requeue_stale) {
      requeue_locked(lease.epoch, lease.prompt);
      ++counters_.stale_requeued;
      return PushOutcome::kStaleRequeued;
    }
    ++counters_.stale_dropped;
    return PushOutcome::kStaleDropped;
  }
  if (filter_ && !filter_(*filtered_on)) {
    remove_lease_locked(lease.id);
    acknowledged_.insert(group.group_id);
    ++counters_.filtered;
    return PushOutcome::kFiltered;
  }
  if (static_cast<int64_t>(buffer_.size()) >= options_.capacity_groups ||
      buffered_bytes_ + bytes > options_.capacity_bytes) {
    ++counters_.rejected_full;
    return absl::ResourceExhaustedError(absl::StrCat("buffer full (", buffer_.size(), " groups, ",
                                                     buffered_bytes_, " bytes); retry later"));
  }
  remove_lease_locked(lease.id);
  acknowledged_.insert(group.group_id);
  buffered_bytes_ += bytes;
  buffer_.push_back(
      Entry{std::move(group), lease.epoch, lease.prompt, min_version, bytes, lease.grant_version});
  ++counters_.accepted;
  return PushOutcome::kAccepted;
}

absl::StatusOr<std::vector<TrajectoryGroup>> ControllerCore::take_batch(
    int64_t n, std::vector<PromptRef>* prompts) {
  absl::MutexLock lock(&mu_);
  evict_stale_locked();
  if (n < 1 || static_cast<int64_t>(buffer_.size()) < n) {
    return absl::UnavailableError(
        absl::StrCat("need ", n, " groups, ", buffer_.size(), " buffered"));
  }
  if (options_.freshest_first) {
    std::stable_sort(buffer_.begin(), buffer_.end(),
                     [](const Entry& a, const Entry& b) { return a.min_version > b.min_version; });
  } else {
    // A lease due now: its group must be in this batch to be trained within the bound.
    for (const auto& [id, lease] : leases_) {
      if (lease.grant_version + options_.max_staleness <= version_) {
        return absl::UnavailableError(absl::StrCat(
            "waiting for lease ", id, " (prompt ", lease.prompt, ", granted at version ",
            lease.grant_version, "): later its group would be stale"));
      }
    }
    std::stable_sort(buffer_.begin(), buffer_.end(), [](const Entry& a, const Entry& b) {
      return a.grant_version < b.grant_version;
    });
  }
  std::vector<TrajectoryGroup> batch;
  for (int64_t i = 0; i < n; ++i) {
    buffered_bytes_ -= buffer_.front().bytes;
    if (prompts != nullptr) prompts->push_back({buffer_.front().epoch, buffer_.front().prompt});
    batch.push_back(std::move(buffer_.front().group));
    buffer_.pop_front();
  }
  counters_.consumed += n;
  return batch;
}

void ControllerCore::evict_stale_locked() {
  const int64_t oldest_allowed = version_ - options_.max_staleness;
  for (auto it = buffer_.begin(); it != buffer_.end();) {
    if (it->min_version >= oldest_allowed) {
      ++it;
      continue;
    }
    buffered_bytes_ -= it->bytes;
    if (options_.requeue_stale) {
      requeue_locked(it->epoch, it->prompt);
      ++counters_.stale_requeued;
    } else {
      ++counters_.stale_dropped;
    }
    it = buffer_.erase(it);
  }
}

void ControllerCore::set_version(int64_t version) {
  absl::MutexLock lock(&mu_);
  version_ = version;
  evict_stale_locked();
}

void ControllerCore::set_weights_version(int64_t version) {
  absl::MutexLock lock(&mu_);
  weights_version_ = version;
}

void ControllerCore::heartbeat(const std::string& worker, double now) {
  absl::MutexLock lock(&mu_);
  seen_locked(worker, now);
}

int64_t ControllerCore::register_worker(const std::string& worker, double now) {
  absl::MutexLock lock(&mu_);
  seen_locked(worker, now);
  told_done_.erase(worker);
  auto held = leases_by_worker_.find(worker);
  if (held == leases_by_worker_.end()) return 0;
  const std::vector<uint64_t> ids(held->second.begin(), held->second.end());
  for (uint64_t id : ids) {
    const Lease& lease = leases_.at(id);
    requeue_locked(lease.epoch, lease.prompt);
    ++counters_.expired;
    remove_lease_locked(id);
  }
  return static_cast<int64_t>(ids.size());
}

void ControllerCore::expire(double now) {
  absl::MutexLock lock(&mu_);
  expire_locked(now);
}

void ControllerCore::add_lease_locked(const Lease& lease) {
  leases_[lease.id] = lease;
  leases_by_deadline_.emplace(lease.deadline, lease.id);
  leases_by_worker_[lease.worker].insert(lease.id);
}

void ControllerCore::remove_lease_locked(uint64_t id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  leases_by_deadline_.erase({it->second.deadline, id});
  auto worker = leases_by_worker_.find(it->second.worker);
  if (worker != leases_by_worker_.end()) {
    worker->second.erase(id);
    if (worker->second.empty()) leases_by_worker_.erase(worker);
  }
  leases_.erase(it);
}

void ControllerCore::seen_locked(const std::string& worker, double now) {
  auto [it, first] = last_seen_.try_emplace(worker, now);
  if (!first && now - it->second > options_.worker_timeout_s) {
    FLYWHEEL_LOG_INFO("worker %s is heard from again after %.1f s of silence", worker,
                      now - it->second);
  }
  it->second = now;
}

void ControllerCore::expire_locked(double now) {
  std::vector<uint64_t> expired;
  for (auto it = leases_by_deadline_.begin(); it != leases_by_deadline_.end() && it->first < now;
       ++it) {
    expired.push_back(it->second);
  }
  for (const auto& [worker, ids] : leases_by_worker_) {
    auto seen = last_seen_.find(worker);
    if (seen == last_seen_.end() || now - seen->second > options_.worker_timeout_s) {
      FLYWHEEL_LOG_WARN(
          "worker %s has been silent for %.1f s (more than %g s): its %d lease(s) are issued "
          "again",
          worker, seen == last_seen_.end() ? 0.0 : now - seen->second, options_.worker_timeout_s,
          ids.size());
      expired.insert(expired.end(), ids.begin(), ids.end());
    }
  }
  for (uint64_t id : expired) {
    auto it = leases_.find(id);
    if (it == leases_.end()) continue;  // listed twice (deadline and silent worker)
    requeue_locked(it->second.epoch, it->second.prompt);
    ++counters_.expired;
    remove_lease_locked(id);
  }
}

absl::Status ControllerCore::release(uint64_t lease_id, bool drop, PartialGeneration partial) {
  absl::Status valid = absl::OkStatus();
  if (!partial.empty()) valid = validate_partial(partial, options_.limits, version());
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return absl::NotFoundError(absl::StrCat("no lease ", lease_id));
  if (drop) {
    ++counters_.dropped;
  } else {
    requeue_locked(it->second.epoch, it->second.prompt);
    ++counters_.released;
    if (!partial.empty() && valid.ok()) {
      partials_[{it->second.epoch, it->second.prompt}] =
          std::make_shared<const PartialGeneration>(std::move(partial));
      ++counters_.partials_returned;
    }
  }
  remove_lease_locked(lease_id);
  return valid;
}

int64_t ControllerCore::release_all() {
  absl::MutexLock lock(&mu_);
  const int64_t n = static_cast<int64_t>(leases_.size());
  while (!leases_.empty()) {
    const Lease& lease = leases_.begin()->second;
    requeue_locked(lease.epoch, lease.prompt);
    ++counters_.released;
    remove_lease_locked(lease.id);
  }
  return n;
}

int64_t ControllerCore::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

int64_t ControllerCore::in_flight() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(leases_.size());
}

int64_t ControllerCore::buffered() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(buffer_.size());
}

ControllerCounters ControllerCore::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace flywheel::buffer
