#!/usr/bin/env bash
# Faults with rollout workers started on their own (issue 26, acceptance): a learner job (2
# ranks under mpirun) with the controller on a fixed loopback port, two `flywheel rollout`
# workers started separately and restarted by this script like a scheduler would; the learner
# job is SIGKILLed after a checkpoint plus a few steps and started again with checkpoint.resume
# auto while the workers keep running; workers are SIGKILLed several times; the dataset is
# larger than the run; max_staleness 2. The run must end with exit 0 everywhere, every trained
# prompt trained exactly once, buffer/dropped 0 and async/staleness_violations 0. A worker whose
# model.dtype differs from the weights the learners publish refuses to start.
# Usage: fault_test.sh FLYWHEEL MPIRUN
set -uo pipefail
flywheel=$1
mpirun=$2
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; done
  pkill -9 -f -- "$work/run.yaml" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do echo "--- $f" >&2; tail -20 "$f" >&2; done
  exit 1
}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[[ $(id -u) == 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

source "$(dirname "${BASH_SOURCE[0]}")/tiny_task.sh"
tiny_task "$flywheel" "$work" 2 300 || fail "the tiny task"
# A free loopback port for the controller (the workers must find it again after the restart).
port=$(node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => {
  console.log(s.address().port); s.close(); });')
[[ -n "$port" ]] || fail "no free port"

steps=100
cat > "$work/run.yaml" <<YAML
model: {path: $work/m, max_seq_len: 24}
tokenizer: {type: char, chat_template: none}
data: {train_path: $work/data/train.jsonl, seed: 3, epochs: 1}
rollout: {group_size: 4, max_new_tokens: 4, max_slots: 8}
algorithm: {name: grpo, kl_coef: 0}
rewards: {functions: [{name: exact_match}]}
trainer: {total_steps: $steps, groups_per_step: 3, lr: 1.0e-3, micro_batch_tokens: 256}
buffer:
  max_staleness: 2
  heartbeat_interval_s: 0.2
  missed_heartbeats: 3
  drain_timeout_s: 10
  server: {bind_address: "127.0.0.1:$port", reconnect_timeout_s: 120}
cluster: {num_learners: 2, threads_per_process: 1, controller_address: "127.0.0.1:$port"}
checkpoint: {every_steps: 5, keep_last: 3}
logging: {run_dir: $work/run, sinks: [jsonl], console_interval_s: 0}
YAML

learner_pid=""
start_learners() {  # $1: log name
  "$mpirun" -np 2 --oversubscribe --bind-to none "$flywheel" learner "$work/run.yaml" \
    --set checkpoint.resume=auto >> "$work/$1.log" 2>&1 &
  learner_pid=$!
  pids+=("$learner_pid")
}
declare -A worker_pid worker_done
start_worker() {  # $1: index
  "$flywheel" rollout "$work/run.yaml" --worker-id "w$1" >> "$work/worker-$1.log" 2>&1 &
  worker_pid[$1]=$!
  pids+=("${worker_pid[$1]}")
}
# Restarts a worker that died with an error or a signal while the learner job runs (as a
# scheduler would); a worker that exited 0 was told training is over.
supervise() {
  local learners_running=1
  kill -0 "$learner_pid" 2> /dev/null || learners_running=0
  for w in 0 1; do
    [[ -n "${worker_done[$w]:-}" ]] && continue
    if ! kill -0 "${worker_pid[$w]}" 2> /dev/null; then
      wait "${worker_pid[$w]}"
      local rc=$?
      if [[ $rc == 0 ]]; then
        worker_done[$w]=1
      elif [[ $learners_running == 0 ]]; then
        worker_done[$w]="killed after the run"
      else
        echo "worker $w exited $rc; restarting it" >> "$work/supervisor.log"
        start_worker "$w"
      fi
    fi
  done
}
step_logged() { grep -qs "\"step\": $1," "$work/run/metrics.jsonl"; }
wait_for() {  # a condition command and its arguments, then seconds
  local seconds=${*: -1}
  for _ in $(seq $((seconds * 20))); do
    "${@:1:$#-1}" && return 0
    supervise
    sleep 0.05
  done
  return 1
}

start_learners learners-1
# Item 13: the learners publish float32 (model.dtype float32); a worker set to bfloat16 refuses
# to start rather than running other weights than the learners' (exit 3: a start failure).
"$flywheel" rollout "$work/run.yaml" --worker-id wrong-dtype --set model.dtype=bfloat16 \
  > "$work/wrong-dtype.log" 2>&1
rc=$?
[[ $rc == 3 ]] || fail "a worker of another dtype exited $rc"
grep -q "model.dtype is bfloat16 here but the learners publish float32" "$work/wrong-dtype.log" ||
  fail "the dtype mismatch is not named"
start_worker 0
start_worker 1

# The learner job dies after its step-10 checkpoint plus a few steps.
wait_for test -f "$work/run/checkpoints/step_10/COMPLETE" 240 || fail "no checkpoint of step 10"
wait_for step_logged 13 120 || fail "step 13 never logged"
pkill -9 -f -- "learner $work/run.yaml"
wait "$learner_pid" 2> /dev/null
echo "learner job killed after step $(grep -c '"async/staleness_max"' "$work/run/metrics.jsonl") rows"
sleep 1  # the workers find the controller gone and keep retrying
start_learners learners-2
wait_for grep -qs "resumed from" "$work/learners-2.log" 120 || fail "the learners did not resume"

# Workers are killed three times while the resumed job trains.
for at in 19 26 33; do
  wait_for step_logged "$at" 240 || fail "step $at never logged"
  victim=${worker_pid[$((at % 2))]}
  kill -9 "$victim" 2> /dev/null && echo "killed worker $((at % 2)) at step $at"
done

# The learner job finishes; the workers hear it and exit 0.
for _ in $(seq 6000); do
  kill -0 "$learner_pid" 2> /dev/null || break
  supervise
  sleep 0.05
done
kill -0 "$learner_pid" 2> /dev/null && fail "the learners did not finish"
wait "$learner_pid"
rc=$?
[[ $rc == 0 ]] || fail "the resumed learner job exited $rc"
# A worker restarted just before the end (by a scheduler that cannot know) that never reached
# the controller before it shut down cannot be told: it retries for reconnect_timeout_s, as it
# must for a controller that restarts. Only such a worker may still run here.
registered_since_start() {  # $1: index; the log of its last start names its registration
  awk -v id="rollout worker w$1 on" 'index($0, id) { r = 0 } /registered with the controller/ { r = 1 }
    END { exit !r }' "$work/worker-$1.log"
}
for _ in $(seq 600); do
  supervise
  [[ -n "${worker_done[0]:-}" && -n "${worker_done[1]:-}" ]] && break
  sleep 0.05
done
for w in 0 1; do
  if [[ -z "${worker_done[$w]:-}" ]] && ! registered_since_start "$w"; then
    echo "worker $w started as the run ended and never registered; stopping it"
    kill -9 "${worker_pid[$w]}" 2> /dev/null
    worker_done[$w]=1
  fi
done
[[ "${worker_done[0]:-}" == 1 && "${worker_done[1]:-}" == 1 ]] ||
  fail "a worker did not exit 0: ${worker_done[0]:-running}, ${worker_done[1]:-running}"
grep -q "flywheel learner: $steps steps" "$work/learners-2.log" || fail "not $steps steps"

# Every trained prompt once; the run's counters.
node -e '
  const fs = require("fs");
  const [dir, steps, per_step] = [process.argv[1], +process.argv[2], +process.argv[3]];
  const seen = new Set();
  const lines = fs.readFileSync(dir + "/trained_prompts.jsonl", "utf8").trim().split("\n");
  const step_seen = new Set();
  for (const l of lines) {
    const row = JSON.parse(l);
    if (step_seen.has(row.step)) throw new Error(`step ${row.step} logged twice`);
    step_seen.add(row.step);
    for (const p of row.prompts) {
      const k = p.join(":");
      if (seen.has(k)) throw new Error(`prompt ${k} trained twice`);
      seen.add(k);
    }
  }
  if (seen.size !== steps * per_step) throw new Error(`${seen.size} prompts trained, want ${steps * per_step}`);
  let last = null;
  for (const l of fs.readFileSync(dir + "/metrics.jsonl", "utf8").trim().split("\n")) {
    const s = JSON.parse(l).scalars;
    if (!("async/staleness_violations" in s)) continue;
    if (s["async/staleness_violations"] !== 0) throw new Error("staleness violations");
    if (s["async/staleness_max"] > 2) throw new Error(`staleness ${s["async/staleness_max"]}`);
    last = s;
  }
  if (last["buffer/dropped"] !== 0) throw new Error(`buffer/dropped ${last["buffer/dropped"]}`);
  if (last["buffer/stale_dropped"] !== 0) throw new Error(`stale_dropped ${last["buffer/stale_dropped"]}`);
  if (last["buffer/rejected_invalid"] !== 0) throw new Error(`rejected_invalid ${last["buffer/rejected_invalid"]}`);
  console.log(`${seen.size} prompts trained once each over ${steps} steps; dropped 0, ` +
              `stale_dropped 0, rejected_invalid 0, staleness violations 0`);' \
  "$work/run" "$steps" 3 || fail "trained prompts or counters"
grep -q "registering again" "$work"/worker-*.log || fail "no worker saw the controller restart"
echo PASS
