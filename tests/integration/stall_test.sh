#!/usr/bin/env bash
# No silent hang (issue 30): each role of a running job is stopped with SIGSTOP (a process that
# is alive and holds its sockets, but does nothing: the worst case for a deadline) and the job
# must either carry on without it or stop within its configured deadline with an error naming
# the stuck role, rank, host and operation.
#   learner-rank-1  learner rank 1 stops: rank 0's collective times out naming rank 1, its
#                   host, pid and last collective; mpirun ends the job; the workers give up on
#                   the controller that went with it, naming it and the call.
#   learner-rank-0  learner rank 0 (the controller's process) stops: rank 1 names rank 0; the
#                   workers' calls to the stopped controller time out, naming it and the call.
#   worker          one rollout worker of two stops: the controller says it is silent, issues
#                   its leases again, and the run ends normally.
#   all-workers     every rollout worker stops: the learners stop after
#                   trainer.no_progress_timeout_s naming the workers and when each was heard.
#   mpmd-worker     a rollout rank of an MPMD job (weights over MPI) stops: learner rank 0's
#                   weight broadcast times out naming that rank.
# The other stall tests, of roles that live inside a worker (docs/cluster.md's table lists every
# wait, its deadline and its test):
#   collective (rank stopped in a collective)  comm.stuck_rank_times_out (tests/comm)
#   reward call that hangs                     ScoringPoolTest.AHungRewardIsTimedOutAndCounted...
#   program under test that loops              SandboxEscapeTest.WallClockInfiniteLoopIsKilled...
#   environment step that hangs                EpisodeRunnerTest.WallClockAStepPastItsDeadline...
#   agent that hangs                           AgentRunnerTest.WallClockAPersistentAgentPast...
#   grpc weight transfer that stalls           WeightSyncTest.WallClockASlowTransferEndsWith...
#   controller that stops answering a worker   ControllerServiceTest.UnreachableController...
# Usage: stall_test.sh FLYWHEEL MPIRUN [SCENARIO...]
set -uo pipefail
flywheel=$1
mpirun=$2
shift 2
scenarios=("$@")
[[ ${#scenarios[@]} -gt 0 ]] || scenarios=(learner-rank-1 learner-rank-0 worker all-workers
                                           mpmd-worker)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; done
  pkill -9 -f -- "$work/" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL ($scenario): $*" >&2
  for f in "$work"/*.log; do echo "--- $f" >&2; tail -"${FAIL_LINES:-25}" "$f" >&2; done
  exit 1
}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[[ $(id -u) == 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
scenario=setup
source "$(dirname "${BASH_SOURCE[0]}")/tiny_task.sh"
tiny_task "$flywheel" "$work" 2 1200 || fail "the tiny task"
host=$(hostname)

# The deadlines under test, small so that the test is short; the bounds below add what mpirun
# and process exit take.
collective_timeout_s=5
rpc_deadline_s=2
reconnect_timeout_s=6
# Counted from the controller's start: on a loaded machine (ctest -j2 beside the multinode
# test) a worker process can take 6 s to register, so 6 s ended runs before any worker joined.
no_progress_timeout_s=15
write_config() {  # $1: run name, $2: steps
  local port
  # A free port below the ephemeral range, which mpirun's own listeners draw from.
  port=$(node -e 'const net = require("net");
    const tryPort = () => { const p = 20000 + Math.floor(Math.random() * 12000);
      const s = net.createServer(); s.on("error", tryPort);
      s.listen(p, "127.0.0.1", () => { console.log(p); s.close(); }); };
    tryPort();')
  [[ -n "$port" ]] || fail "no free port"
  cat > "$work/$1.yaml" << YAML
model: {path: $work/m, max_seq_len: 24}
tokenizer: {type: char, chat_template: none}
data: {train_path: $work/data/train.jsonl, seed: 3, epochs: 1}
rollout: {group_size: 4, max_new_tokens: 4, max_slots: 8}
algorithm: {name: grpo, kl_coef: 0}
rewards: {functions: [{name: exact_match}]}
trainer: {total_steps: $2, groups_per_step: 2, lr: 1.0e-3, micro_batch_tokens: 256,
          no_progress_timeout_s: $no_progress_timeout_s}
buffer:
  max_staleness: 2
  heartbeat_interval_s: 0.2
  missed_heartbeats: 5
  push_timeout_s: 1
  drain_timeout_s: 5
  server: {bind_address: "127.0.0.1:$port", rpc_deadline_s: $rpc_deadline_s,
           reconnect_timeout_s: $reconnect_timeout_s}
cluster: {num_learners: 2, threads_per_process: 1, controller_address: "127.0.0.1:$port",
          collective_timeout_s: $collective_timeout_s}
checkpoint: {every_steps: 0}
logging: {run_dir: $work/$1, sinks: [jsonl], console_interval_s: 0}
YAML
  echo "127.0.0.1:$port"
}
wait_step() {  # $1: run dir, $2: step, $3: pid that must stay alive
  for _ in $(seq 1200); do
    grep -qs "\"step\": $2," "$1/metrics.jsonl" && return 0
    kill -0 "$3" 2> /dev/null || fail "the job ended before step $2"
    sleep 0.05
  done
  fail "step $2 not reached"
}
# The pid of rank $3 of group $2, from the progress records in run dir $1.
rank_pid() {
  local record
  record=$(head -c 255 "$1/progress/$2.rank$3" 2> /dev/null) || fail "no progress record $2.rank$3"
  awk '{print $4}' <<< "$record"
}
# Waits for pid $1 to exit within $2 seconds; prints its exit code, fails when it is still
# running (a hang).
wait_within() {  # $1: pid, $2: seconds, $3: what
  local start=$SECONDS
  while kill -0 "$1" 2> /dev/null; do
    if ((SECONDS - start > $2)); then
      # Where it waits, for whoever reads the failure.
      command -v gdb > /dev/null && timeout 60 gdb -p "$1" -batch -ex "thread apply all bt" \
        > "$work/hang-backtrace.log" 2>&1
      fail "$3 still running $2 s after the stall: a silent hang"
    fi
    sleep 0.1
  done
  wait "$1"
  local rc=$?
  echo "  $3 exited $rc after $((SECONDS - start)) s (bound $2 s)"
  return 0
}
expect_log() {  # $1: file, $2: extended regex, $3: what it shows
  grep -Eq -- "$2" "$1" || fail "$3: no line matching /$2/ in $(basename "$1")"
  echo "  $3: $(grep -Eo -- "$2.{0,160}" "$1" | head -1)"
}
start_learners() {  # $1: run name; returns once the controller listens
  "$mpirun" -np 2 --oversubscribe --bind-to none "$flywheel" learner "$work/$1.yaml" \
    > "$work/$1-learners.log" 2>&1 &
  learners=$!
  pids+=("$learners")
  for i in $(seq 1201); do
    grep -qs "controller listening on" "$work/$1-learners.log" && return 0
    ((i < 1201)) || fail "the controller did not start"
    kill -0 "$learners" 2> /dev/null || fail "the learner job ended at start"
    sleep 0.05
  done
}
declare -A worker_pid
start_worker() {  # $1: run name, $2: worker id
  "$flywheel" rollout "$work/$1.yaml" --worker-id "$2" > "$work/$1-$2.log" 2>&1 &
  worker_pid[$2]=$!
  pids+=("$!")
}
wait_started() {  # $1: run name, $2...: worker ids; each must log its start line within 30 s
  local run=$1 id i
  shift
  for id in "$@"; do
    for i in $(seq 601); do
      grep -qs "rollout worker $id on" "$work/$run-$id.log" && break
      ((i < 601)) || fail "worker $id did not start"
      sleep 0.05
    done
  done
}

# A learner rank stops: the other rank names it; the workers name the controller.
learner_rank() {  # $1: the rank stopped
  local run=rank$1 other=$((1 - $1)) address
  address=$(write_config "$run" 400)
  start_learners "$run"
  start_worker "$run" a
  start_worker "$run" b
  wait_started "$run" a b
  wait_step "$work/$run" 3 "$learners"
  local victim
  victim=$(rank_pid "$work/$run" learners "$1")
  kill -STOP "$victim"
  echo "  stopped learner rank $1 (pid $victim)"
  wait_within "$learners" $((collective_timeout_s + 15)) "the learner job"
  kill -9 "$victim" 2> /dev/null
  local log="$work/$run-learners.log"
  expect_log "$log" "on group 'learners' \(mpi\) timed out: rank $other of 2 on $host" \
    "rank $other's error"
  # Stopped before the collective ("has not reached it: its last was #N OP") or inside it.
  expect_log "$log" "Stuck: rank $1 on $host \(pid $victim, its process is stopped\) (has not reached it: its last was|is in it) \(?#[0-9]+ [a-z_]+" \
    "the stuck rank named"
  for w in a b; do
    wait_within "${worker_pid[$w]}" $((2 * rpc_deadline_s + reconnect_timeout_s + 15)) "worker $w"
    wait "${worker_pid[$w]}" && fail "worker $w exited 0 without its controller"
    expect_log "$work/$run-$w.log" "the controller at $address did not answer [A-Za-z]+" \
      "worker $w's error"
  done
}

# One worker of two stops: the run goes on without it.
one_worker() {
  # 600 steps: under ctest -j2 a 300-step run ended (29 s) before any of the 11 tries below
  # caught worker a holding leases.
  local run=worker steps=600
  # Each try stops worker a for 2 s, which would expire an AcquireWork it has in flight under
  # the 2 s deadline of the other scenarios (and end the worker: a missed deadline is an error),
  # so here the deadline is longer than a stop. write_config reads this local.
  local rpc_deadline_s=10
  write_config "$run" "$steps" > /dev/null
  start_learners "$run"
  start_worker "$run" a
  wait_step "$work/$run" 3 "$learners"
  # Worker a generates alone (so it holds leases when it stops) until b has started.
  start_worker "$run" b
  wait_started "$run" b
  # A stop matters when it catches the worker holding leases (it often waits for the staleness
  # budget with none): stopped again until the controller reports the silent worker's leases.
  for i in $(seq 11); do
    ((i < 11)) || fail "worker a never held a lease when stopped"
    kill -0 "${worker_pid[a]}" 2> /dev/null || fail "worker a exited before a stop caught it holding leases"
    kill -STOP "${worker_pid[a]}"
    sleep 2
    grep -qs "worker a has been silent" "$work/$run-learners.log" && break
    kill -CONT "${worker_pid[a]}"
    sleep 0.$((RANDOM % 10))
  done
  echo "  stopped worker a (pid ${worker_pid[a]}), try $i"
  wait "$learners" || fail "the learner job exited $? with a stopped worker"
  grep -q "flywheel learner: $steps steps" "$work/$run-learners.log" || fail "not $steps steps"
  expect_log "$work/$run-learners.log" "worker a has been silent for [0-9.]+ s" \
    "the controller on the stopped worker"
  wait "${worker_pid[b]}" || fail "worker b exited $?"
  kill -9 "${worker_pid[a]}"
}

# Every worker stops: the learners wait trainer.no_progress_timeout_s, then name them.
all_workers() {
  local run=workers
  write_config "$run" 400 > /dev/null
  start_learners "$run"
  start_worker "$run" a
  start_worker "$run" b
  wait_started "$run" a b
  wait_step "$work/$run" 3 "$learners"
  kill -STOP "${worker_pid[a]}" "${worker_pid[b]}"
  echo "  stopped workers a and b"
  wait_within "$learners" $((no_progress_timeout_s + 15)) "the learner job"
  wait "$learners" && fail "the learner job exited 0 without workers"
  expect_log "$work/$run-learners.log" \
    "no group arrived for [0-9]+ s \(trainer.no_progress_timeout_s\).*workers last heard from: a [0-9.]+ s ago, b [0-9.]+ s ago" \
    "the learners' error"
  kill -9 "${worker_pid[a]}" "${worker_pid[b]}"
}

# A rollout rank of an MPMD job stops: the weight broadcast over MPI names it.
mpmd_worker() {
  local run=mpmd
  write_config "$run" 400 > /dev/null
  "$flywheel" train "$work/$run.yaml" --set rollout.num_workers=2 \
    --set weight_sync.transport=mpi > "$work/$run-train.log" 2>&1 &
  learners=$!
  pids+=("$learners")
  wait_step "$work/$run" 3 "$learners"
  local victim
  victim=$(rank_pid "$work/$run" world 3)
  kill -STOP "$victim"
  echo "  stopped world rank 3, a rollout worker (pid $victim)"
  wait_within "$learners" $((collective_timeout_s + 20)) "flywheel train"
  wait "$learners" && fail "flywheel train exited 0 with a stopped rollout rank"
  kill -9 "$victim" 2> /dev/null
  expect_log "$work/$run-train.log" "timed out: rank 0 of [0-9]+ on $host" "rank 0's error"
  expect_log "$work/$run-train.log" "Stuck: rank [0-9]+ on $host \(pid $victim, its process is stopped\)" \
    "the stuck rollout rank named (first)"
}

for scenario in "${scenarios[@]}"; do
  echo "== $scenario"
  case $scenario in
    learner-rank-1) learner_rank 1 ;;
    learner-rank-0) learner_rank 0 ;;
    worker) one_worker ;;
    all-workers) all_workers ;;
    mpmd-worker) mpmd_worker ;;
    *) fail "unknown scenario" ;;
  esac
done
echo PASS
