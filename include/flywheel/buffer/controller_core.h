// The controller's core (no gRPC, no LibTorch): the prompt cursor with leases, the staleness
// budget, and the staleness-bounded trajectory buffer (DESIGN.md §1, AReaL's rule).
//
//   acquire():  grants prompts only while in_flight + buffered + consumed
//               < (max_staleness + g + 1) * groups_per_step, where g is the grant version:
//               the learner's version, or the newest published weights when they are older
//               (set_weights_version()); a worker generates with weights of at least g, so a
//               group is trained at most max_staleness versions after its oldest token
//   push():     validates a group, checks its lease, applies staleness and the group filter,
//               buffers it (bounded capacity)
//   take_batch(): hands groups to the learners; never a group whose oldest token version is
//               below version - max_staleness (set_version() evicts those: drop or requeue)
//
// Every prompt of an epoch is trained on exactly once unless it is filtered or dropped as
// stale (both counted): an expired lease re-issues its prompt and a late push under it is
// rejected; a re-pushed group id is acknowledged without being stored twice.
// Thread-safe. Time is passed in (seconds on any monotonic clock) so tests are deterministic.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/buffer/partial_generation.h"
#include "flywheel/buffer/recent_ids.h"
#include "flywheel/buffer/trajectory.h"

namespace flywheel::buffer {

struct ControllerOptions {
  int64_t num_prompts = 0;  // dataset size (> 0)
  int64_t epochs = 1;
  bool shuffle = true;
  uint64_t seed = 1;
  int64_t groups_per_step = 8;
  int64_t max_staleness = 1;    // 0 = synchronous on-policy
  bool requeue_stale = false;   // stale groups: false = drop, true = re-issue the prompt
  bool freshest_first = false;  // sampling order: false = FIFO
  int64_t capacity_groups = 1024;
  int64_t capacity_bytes = int64_t{1} << 30;
  double lease_timeout_s = 600;
  double worker_timeout_s = 15;  // a worker silent this long loses its leases
  // Acknowledged group ids remembered to answer re-pushes "duplicate". An older id pushed again
  // finds its lease gone and is rejected (FAILED_PRECONDITION): never stored twice either way.
  int64_t remembered_group_ids = 1 << 18;
  ValidationLimits limits;
  // Identity of the dataset's content (PromptDataset::fingerprint()), recorded in snapshots so
  // that a snapshot is never restored over another dataset. 0 = not known.
  uint64_t dataset_fingerprint = 0;
  // This controller start's id, < 2^31 (random: make_incarnation()). It is the high 32 bits of
  // every lease id this start grants, so a restarted controller never grants an id an earlier
  // start granted, and clients that see it change know their leases are gone. 0 = none: lease
  // ids count from 1 (tests).
  uint32_t incarnation = 0;
  // Groups the learners will take in all (trainer.total_steps x groups_per_step; a resumed run
  // counts the groups it took before): no prompt is granted beyond what will be trained, and
  // once they are taken acquire() answers kDone. 0 = no bound.
  int64_t max_groups = 0;
  // What the group filter sees of each trajectory: "" = its reward, else that entry of its
  // reward_breakdown (a reward function's label: DAPO's dynamic sampling on accuracy, as verl's
  // filter_groups.metric). A group without it is rejected as invalid.
  std::string filter_metric;

  absl::Status validate() const;
};

// A random incarnation id in [1, 2^31) for ControllerOptions::incarnation.
uint32_t make_incarnation();
// What the ABORTED status says that a client of an earlier incarnation gets (controller.proto).
inline constexpr char kControllerRestarted[] = "controller restarted";

struct Lease {
  uint64_t id = 0;
  int64_t epoch = 0;
  int64_t prompt = 0;  // index into the dataset
  std::string worker;
  double deadline = 0;
  int64_t grant_version = 0;  // the version it was granted at (Grant::version)
  // What a stopped worker generated for this prompt (release() with a partial), to continue
  // rather than generate again; null for a fresh prompt.
  std::shared_ptr<const PartialGeneration> partial;
};

// What one acquire() may grant besides max_prompts: the leases travel in one reply, which must
// fit in one message. Prompts are granted in order while their costs fit in max_cost.
struct GrantBudget {
  std::function<int64_t(int64_t prompt)> cost;  // bytes the lease of `prompt` adds to the reply
  int64_t max_cost = 0;
};

struct Grant {
  enum class Kind { kWork, kWait, kDone };
  Kind kind = Kind::kWait;
  std::vector<Lease> leases;  // kWork only
  int64_t version = 0;
};

// A prompt of the dataset in one epoch.
struct PromptRef {
  int64_t epoch = 0;
  int64_t prompt = 0;
};

enum class PushOutcome { kAccepted, kDuplicate, kFiltered, kStaleDropped, kStaleRequeued };
const char* push_outcome_name(PushOutcome outcome);

// Exact counts of everything that happened to prompts and groups.
struct ControllerCounters {
  int64_t granted = 0;             // leases handed out (re-issues included)
  int64_t expired = 0;             // leases that expired (prompt re-issued)
  int64_t released = 0;            // leases given back by workers (prompt re-issued)
  int64_t accepted = 0;            // groups buffered
  int64_t duplicates = 0;          // re-pushed group ids, acknowledged again
  int64_t filtered = 0;            // groups removed by the group filter
  int64_t stale_dropped = 0;       // groups dropped as too stale
  int64_t stale_requeued = 0;      // groups whose prompt was re-issued as too stale
  int64_t rejected_invalid = 0;    // pushes that failed validation
  int64_t rejected_lease = 0;      // pushes under an unknown or expired lease
  int64_t rejected_full = 0;       // pushes refused by the capacity limits
  int64_t consumed = 0;            // groups handed to learners
  int64_t dropped = 0;             // prompts given up by workers (cannot be generated)
  int64_t partials_returned = 0;   // leases given back with their samples so far (preemption)
  int64_t partials_resumed = 0;    // of those, granted again with the samples to continue
  int64_t partials_discarded = 0;  // of those, too stale to continue: generated afresh
  int64_t resumed_tokens = 0;      // tokens the resumed partials held (not generated again)

  // Every counter by name (snapshot, GetStatus), in declaration order.
  std::vector<std::pair<std::string, int64_t*>> fields();
  std::vector<std::pair<std::string, int64_t>> entries() const;
};

// Seconds on the monotonic clock the controller's deadlines use (steady_clock).
double monotonic_seconds();

class ControllerCore {
 public:
  using Filter = std::function<bool(const std::vector<double>& rewards)>;

  // InvalidArgument for invalid options. `filter` (may be empty) decides which groups to keep.
  static absl::StatusOr<std::unique_ptr<ControllerCore>> create(const ControllerOptions& options,
                                                                Filter filter = nullptr);

  // Up to `max_prompts` leases for `worker` if the staleness budget allows (kWork), and only as
  // many as fit in `budget` when one is given; kWait when none can be granted now (budget
  // spent, every remaining prompt in flight, or groups still buffered that a version bump may
  // requeue), kDone when nothing can ever be issued again: every epoch is issued, nothing is in
  // flight or waiting to be re-issued, and (with requeue_stale) nothing is buffered, or
  // max_groups groups were taken, or close() was called. Also counts as a heartbeat.
  Grant acquire(const std::string& worker, int64_t max_prompts, double now,
                const GrantBudget* budget = nullptr);

  // Errors: FailedPrecondition for an unknown or expired lease, or a lease granted to another
  // worker than group.worker_id or for another prompt than group.prompt_index (when it is
  // given), InvalidArgument naming the bad
  // field (validate_group), ResourceExhausted when the buffer is full (the lease stays valid,
  // and `group` is left as it was: retry with it). A group id seen before returns kDuplicate
  // without storing it again. Validation runs before the core's lock is taken, so a large
  // group does not hold up other calls while it is checked.
  absl::StatusOr<PushOutcome> push(TrajectoryGroup&& group, double now);

  // Exactly `n` groups, or Unavailable when fewer are buffered. FIFO takes them in grant
  // order (oldest grant version first, then push order) and waits (Unavailable) while a lease
  // granted at version - max_staleness is still out: taken later it would be stale, so the
  // bound would drop its prompt. freshest_first takes the newest groups and makes no such
  // promise. `prompts`, when given, gets the (epoch, prompt) each group answers, in order.
  absl::StatusOr<std::vector<TrajectoryGroup>> take_batch(
      int64_t n, std::vector<PromptRef>* prompts = nullptr);

  // The learner's new version; buffered groups that became too stale are dropped or requeued.
  void set_version(int64_t version);
  // The newest weights workers can fetch (weight_sync.every_steps > 1 publishes every few
  // versions): grants are made at min(version, this). Never called: the version.
  void set_weights_version(int64_t version);

  void heartbeat(const std::string& worker, double now);
  // `worker` (re)started and holds no lease: leases still under its name belong to a previous
  // run of it (killed and restarted faster than worker_timeout_s, whose heartbeats would keep
  // them alive forever) and are given back, their prompts re-issued first (counted as
  // expired). Also counts as a heartbeat. Returns how many were given back.
  int64_t register_worker(const std::string& worker, double now);
  // Expires leases past their deadline or held by silent workers; their prompts are re-issued.
  void expire(double now);
  // A worker gives a lease back (e.g. aborted); the prompt is re-issued. NotFound if unknown.
  // With `drop`, the prompt is not re-issued: it cannot be generated (counted as dropped).
  // With a `partial` (a stopped worker's samples so far), the prompt is re-issued with it: the
  // next grant of the prompt carries it (Lease::partial) when its oldest token is at most
  // max_staleness versions older than that grant's version, and is generated afresh otherwise
  // (counted). An invalid partial (validate_partial) is InvalidArgument naming the field; the
  // lease is released all the same.
  absl::Status release(uint64_t lease_id, bool drop = false, PartialGeneration partial = {});
  // Gives back every lease (their prompts are re-issued first); returns how many. A learner job
  // restarted from a checkpoint calls it: the workers that held them are gone.
  int64_t release_all();

  int64_t version() const;
  uint32_t incarnation() const { return options_.incarnation; }
  int64_t group_size() const { return options_.limits.group_size; }
  // Trajectories a group may hold: group_size, times max_segments for agents' segments.
  int64_t max_trajectories() const {
    return options_.limits.group_size * options_.limits.max_segments;
  }
  int64_t num_prompts() const { return options_.num_prompts; }
  int64_t in_flight() const;
  // Training is over: acquire() answers kDone from now on (workers stop cleanly).
  void close();
  bool closed() const;
  // A heartbeat of `worker` whose reply says whether training is over (closed()); a worker
  // answered true counts as told, as one answered kDone by acquire().
  bool heartbeat_done(const std::string& worker, double now);
  // Closed, no lease out, and every worker heard within worker_timeout_s was told that training
  // is over: the server can shut down without failing a worker.
  bool settled(double now) const;
  // Every epoch is issued, nothing waits to be re-issued and no lease is out: no group will
  // arrive any more (what is buffered is all there will be).
  bool drained() const;
  int64_t buffered() const;
  // Each worker heard from, with how long ago at `now` ("w0 0.2 s ago, w1 14.0 s ago"), for
  // errors that must say who went quiet; "no rollout worker has registered" without any.
  std::string workers_heard(double now) const;
  // in_flight + buffered + consumed must stay below this for acquire() to grant.
  int64_t budget_limit() const;
  ControllerCounters counters() const;

  // The whole state as JSON (cursor, leases, requeued prompts, buffered groups, acknowledged
  // group ids still remembered, counters, version), with the identity of the dataset (prompt
  // count, content fingerprint, seed, shuffle) and the group shape (group_size, vocab_size) it
  // was made for. restore() rebuilds it; lease deadlines restart from `now` (a time on the same
  // clock later calls use), and the budget follows from the restored counts. InvalidArgument,
  // naming what differs or what is malformed, for a snapshot of another dataset or shape,
  // buffered groups that fail validation under `options`, missing arrays, duplicate lease ids
  // or a next_lease_id that does not exceed every lease id.
  std::string snapshot() const;
  static absl::StatusOr<std::unique_ptr<ControllerCore>> restore(const ControllerOptions& options,
                                                                 const std::string& snapshot,
                                                                 double now,
                                                                 Filter filter = nullptr);

 private:
  ControllerCore(const ControllerOptions& options, Filter filter);
  // The prompt acquire() would issue next (a requeued one first); false when none is left.
  bool peek_prompt_locked(int64_t* epoch, int64_t* prompt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void pop_prompt_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void expire_locked(double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a call of `worker` at `now`; logs a worker heard from again after a silence that
  // cost it its leases.
  void seen_locked(const std::string& worker, double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lease bookkeeping: the lease map plus its two indexes (deadline, worker).
  void add_lease_locked(const Lease& lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void remove_lease_locked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void requeue_locked(int64_t epoch, int64_t prompt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void evict_stale_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const std::vector<int64_t>& order_locked(int64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ControllerOptions options_;
  const Filter filter_;
  mutable absl::Mutex mu_;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t weights_version_ ABSL_GUARDED_BY(mu_) = -1;  // -1: not set
  int64_t grant_version_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return weights_version_ < 0 ? version_ : std::min(version_, weights_version_);
  }
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;   // epoch of the cursor
  int64_t cursor_ ABSL_GUARDED_BY(mu_) = 0;  // next position in the epoch's order
  uint64_t next_lease_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<int64_t, std::vector<int64_t>> orders_ ABSL_GUARDED_BY(mu_);    // epoch -> permutation
  std::deque<std::pair<int64_t, int64_t>> requeued_ ABSL_GUARDED_BY(mu_);  // (epoch, prompt)
  // Partial generations of requeued prompts, by (epoch, prompt).
  std::map<std::pair<int64_t, int64_t>, std::shared_ptr<const PartialGeneration>> partials_
      ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  // Indexes so that expiry costs O(expired + workers), not O(leases), per call.
  std::set<std::pair<double, uint64_t>> leases_by_deadline_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<uint64_t>> leases_by_worker_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> last_seen_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> told_done_ ABSL_GUARDED_BY(mu_);  // since close()
  struct Entry {
    TrajectoryGroup group;
    int64_t epoch = 0, prompt = 0;  // the prompt it answers, for requeueing
    int64_t min_version = 0;
    int64_t bytes = 0;
    int64_t grant_version = 0;  // of its lease
  };
  std::deque<Entry> buffer_ ABSL_GUARDED_BY(mu_);
  int64_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  RecentIds acknowledged_ ABSL_GUARDED_BY(mu_);
  ControllerCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::buffer
