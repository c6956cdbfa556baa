#!/usr/bin/env bash
# Preemption without lost work (issue 30): a learner job (2 ranks) and two rollout workers
# started on their own, with long responses (up to 128 tokens from a tiny random model); the
# workers are stopped with SIGTERM mid-run, as spot or preemptible nodes are, and replaced. Each
# stopped worker hands its half-done groups back with their samples so far, and the others
# continue them (buffer/partials_resumed, buffer/resumed_tokens). The run must end with every
# prompt trained once, 0 staleness violations and buffer/dropped 0; it prints the tokens
# generated beside what generating the handed-back samples again would have cost.
# Usage: preemption_test.sh FLYWHEEL MPIRUN
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

# A 2-layer Qwen2-shaped model with room for long responses, and 2-digit sums to prompt it with.
cat > "$work/c.json" << 'JSON'
{"model_type": "qwen2", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2,
 "max_position_embeddings": 160}
JSON
"$flywheel" init-model --config "$work/c.json" --out "$work/m" --char-tokenizer --seed 3 \
  > /dev/null || fail "init-model"
"$flywheel" make-data addition --digits 2 --train 400 --eval 8 --seed 5 --out "$work/data" \
  > /dev/null || fail "make-data"
port=$(node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => {
  console.log(s.address().port); s.close(); });')
[[ -n "$port" ]] || fail "no free port"
steps=40
# Responses of up to 128 tokens, which a random model rarely ends early: generation, not the
# learners, bounds the run, and a stop finds groups well under way.
cat > "$work/run.yaml" << YAML
model: {path: $work/m, max_seq_len: 144}
tokenizer: {type: char, chat_template: none}
data: {train_path: $work/data/train.jsonl, seed: 3, epochs: 1}
rollout: {group_size: 4, max_new_tokens: 128, max_slots: 8}
algorithm: {name: grpo, kl_coef: 0}
rewards: {functions: [{name: exact_match}]}
trainer: {total_steps: $steps, groups_per_step: 3, lr: 1.0e-3, micro_batch_tokens: 2048}
buffer:
  max_staleness: 2
  heartbeat_interval_s: 0.2
  missed_heartbeats: 5
  server: {bind_address: "127.0.0.1:$port"}
cluster: {num_learners: 2, threads_per_process: 1, controller_address: "127.0.0.1:$port"}
checkpoint: {every_steps: 0}
logging: {run_dir: $work/run, sinks: [jsonl], console_interval_s: 0}
YAML

"$mpirun" -np 2 --oversubscribe --bind-to none "$flywheel" learner "$work/run.yaml" \
  > "$work/learners.log" 2>&1 &
learners=$!
pids+=("$learners")
declare -A worker_pid
start_worker() {  # name
  "$flywheel" rollout "$work/run.yaml" --worker-id "$1" > "$work/worker-$1.log" 2>&1 &
  worker_pid[$1]=$!
  pids+=("$!")
}
step_logged() { grep -qs "\"step\": $1," "$work/run/metrics.jsonl"; }
wait_step() {
  for _ in $(seq 2400); do
    step_logged "$1" && return 0
    kill -0 "$learners" 2> /dev/null || fail "the learners ended before step $1"
    sleep 0.05
  done
  fail "step $1 not reached"
}
# SIGTERM, as a node's preemption notice: the worker must hand over and exit 0 in time.
preempt() {  # name
  local start=$SECONDS
  kill -TERM "${worker_pid[$1]}"
  wait "${worker_pid[$1]}" || fail "worker $1 exited $? on SIGTERM"
  echo "worker $1 stopped in $((SECONDS - start)) s: $(grep -o 'stopping: .*' "$work/worker-$1.log")"
}
start_worker a
start_worker b
wait_step 8
preempt a
start_worker c
wait_step 18
preempt b
start_worker d
wait_step 28
preempt c
wait "$learners" || fail "the learner job exited $?"
grep -q "flywheel learner: $steps steps" "$work/learners.log" || fail "not $steps steps"
for w in d; do wait "${worker_pid[$w]}" || fail "worker $w exited $?"; done

# The generated tokens of every worker beside the tokens resumed rather than generated again.
generated=0
for f in "$work"/worker-*.log; do
  n=$(grep -o 'released, [0-9]* tokens' "$f" | grep -o '[0-9]*' | head -1)
  generated=$((generated + ${n:-0}))
done
node -e '
  const fs = require("fs");
  const [dir, steps, per_step, generated] = [process.argv[1], +process.argv[2], +process.argv[3],
                                             +process.argv[4]];
  const seen = new Set();
  for (const l of fs.readFileSync(dir + "/trained_prompts.jsonl", "utf8").trim().split("\n")) {
    for (const p of JSON.parse(l).prompts) {
      const k = p.join(":");
      if (seen.has(k)) throw new Error(`prompt ${k} trained twice`);
      seen.add(k);
    }
  }
  if (seen.size !== steps * per_step) throw new Error(`${seen.size} prompts trained`);
  let last = null;
  for (const l of fs.readFileSync(dir + "/metrics.jsonl", "utf8").trim().split("\n")) {
    const s = JSON.parse(l).scalars;
    if (!("async/staleness_violations" in s)) continue;
    if (s["async/staleness_violations"] !== 0) throw new Error("staleness violations");
    last = s;
  }
  const b = (name) => last["buffer/" + name];
  if (b("dropped") !== 0) throw new Error(`buffer/dropped ${b("dropped")}`);
  if (!(b("partials_returned") >= 2)) throw new Error(`${b("partials_returned")} partials returned`);
  if (!(b("partials_resumed") >= 1)) throw new Error("no partial was resumed");
  if (!(b("resumed_tokens") > 0)) throw new Error("no token was resumed");
  console.log(`${seen.size} prompts trained once each; groups handed back with their samples: ` +
              `${b("partials_returned")}, continued: ${b("partials_resumed")}, generated ` +
              `afresh (too stale): ${b("partials_discarded")}; tokens generated ${generated}, ` +
              `${generated + b("resumed_tokens")} had the handed-back samples been generated ` +
              `again (${b("resumed_tokens")} tokens saved)`);' \
  "$work/run" "$steps" 3 "$generated" || fail "trained prompts or counters"
echo PASS
