#!/usr/bin/env bash
# Synchronous vs asynchronous RL on the quickstart task: one learner rank and one rollout worker,
# each pinned to its own core with one thread, the same job run with buffer.max_staleness 0
# (generation and training alternate) and 1 (they overlap). From the synchronous run's own phase
# timings, T_gen = mean timing_s/gen (the learner waiting for its batch) and T_train = mean
# timing_s/update_actor + timing_s/weight_sync; the ideal speedup of overlapping them is
# (T_gen + T_train) / max(T_gen, T_train). Prints the achieved speedup (synchronous seconds per
# step / asynchronous), the ideal and their ratio (target >= 0.85), and both runs' final held-out
# accuracy. Needs 2 cores.
# Usage: benchmarks/e2e_bench.sh [FLYWHEEL] [STEPS] [--set KEY=VALUE ...]
# Environment: E2E_BENCH_RUN (a quickstart run directory, default runs/quickstart: its data and
# SFT checkpoint), E2E_BENCH_MODEL (the starting model, default $E2E_BENCH_RUN/sft/hf). Extra
# --set overrides apply to both runs, after the bench's own (rollout.group_size 4,
# rollout.max_slots 8: they balance the phases).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
flywheel=${1:-$root/build/flywheel}
steps=${2:-60}
shift $(( $# < 2 ? $# : 2 ))
extra=("$@")
# Balanced phases: groups of 4 (half the learner's tokens of the quickstart's 8) and an engine of
# 8 slots (two groups at a time, as a worker whose batch is bounded by memory) make generation
# and training take about as long as each other on one core each (0.19 s and 0.19 s measured).
balance=(--set rollout.group_size=4 --set rollout.max_slots=8)
work=${E2E_BENCH_DIR:-$(mktemp -d)}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[[ $(id -u) == 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(( $(getconf _NPROCESSORS_ONLN) >= 2 )) || { echo "e2e_bench needs 2 cores"; exit 1; }
cd "$root"
echo "CPU: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | xargs), $(getconf _NPROCESSORS_ONLN) cores"

# The quickstart's task and warm-started model (its SFT checkpoint when present).
quickstart=${E2E_BENCH_RUN:-runs/quickstart}
model=${E2E_BENCH_MODEL:-$quickstart/sft/hf}
data=$quickstart/data
if [[ ! -f "$model/model.safetensors" ]]; then
  echo "run scripts/quickstart.sh first (the bench starts from its SFT checkpoint)"; exit 1
fi

run() {  # name max_staleness
  local dir="$work/$1"
  rm -rf "$dir"
  local common=(--set "model.path=$model" --set "data.train_path=$data/train.jsonl"
    --set "data.eval_path=$data/eval.jsonl" --set "logging.run_dir=$dir"
    --set "buffer.max_staleness=$2" --set "trainer.total_steps=$steps"
    --set cluster.num_learners=1 --set cluster.threads_per_process=1
    --set eval.every_steps=0 --set checkpoint.every_steps=0 --set checkpoint.export_hf=false
    --set logging.sinks=[jsonl] "${balance[@]}" "${extra[@]}")
  rm -f "$dir/controller_address"
  mkdir -p "$dir"
  taskset -c 0 mpirun -np 1 --bind-to none "$flywheel" learner configs/quickstart.yaml \
    "${common[@]}" > "$dir/learner.log" 2>&1 &
  local learner=$!
  for _ in $(seq 600); do [[ -f "$dir/controller_address" ]] && break; sleep 0.1; done
  if [[ ! -f "$dir/controller_address" ]]; then
    echo "the learner did not start:"; head -5 "$dir/learner.log"; exit 1
  fi
  taskset -c 1 "$flywheel" rollout configs/quickstart.yaml "${common[@]}" \
    --controller "$(cat "$dir/controller_address")" --worker-id bench > "$dir/worker.log" 2>&1 &
  local worker=$!
  wait "$learner"
  kill "$worker" 2> /dev/null || true
  wait "$worker" 2> /dev/null || true
}

run sync 0
run async 1
node -e '
  const fs = require("fs");
  const load = d => fs.readFileSync(d + "/metrics.jsonl", "utf8").trim().split("\n").map(JSON.parse);
  const [sync, async_] = [load(process.argv[1] + "/sync"), load(process.argv[1] + "/async")];
  const steps = rows => rows.filter(r => "perf/time_per_step" in r.scalars);
  const skip = 5;  // warm-up steps
  const mean = (rows, k) => rows.reduce((a, r) => a + r.scalars[k], 0) / rows.length;
  const per_step = rows => { const s = steps(rows).slice(skip);
    return (s[s.length - 1].scalars["perf/elapsed_s"] - s[0].scalars["perf/elapsed_s"]) / (s.length - 1); };
  const s = steps(sync).slice(skip);
  const tgen = mean(s, "timing_s/gen"), ttrain = mean(s, "timing_s/update_actor") + mean(s, "timing_s/weight_sync");
  const ideal = (tgen + ttrain) / Math.max(tgen, ttrain);
  const achieved = per_step(sync) / per_step(async_);
  const acc = rows => rows.filter(r => "eval/accuracy" in r.scalars).map(r => r.scalars["eval/accuracy"]);
  console.log(`sync:  ${per_step(sync).toFixed(3)} s/step (T_gen ${tgen.toFixed(3)} s, T_train ${ttrain.toFixed(3)} s)`);
  const a = steps(async_).slice(skip);
  const ttrain_async = mean(a, "timing_s/update_actor") + mean(a, "timing_s/weight_sync");
  console.log(`async: ${per_step(async_).toFixed(3)} s/step (its own T_train ${ttrain_async.toFixed(3)} s, learner waiting ${mean(a, "timing_s/gen").toFixed(3)} s), staleness_max ${Math.max(...steps(async_).map(r => r.scalars["async/staleness_max"]))}`);
  console.log(`speedup: achieved ${achieved.toFixed(2)}x, ideal ${ideal.toFixed(2)}x, ratio ${(achieved / ideal).toFixed(2)} (target >= 0.85)`);
  console.log(`held-out accuracy: sync ${acc(sync).join(" -> ")}, async ${acc(async_).join(" -> ")}`);' "$work"
