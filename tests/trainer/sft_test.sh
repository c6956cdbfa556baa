#!/usr/bin/env bash
# `flywheel sft` under mpirun -np 2 on a synthetic task (copy the second letter: "ab:" -> "b"):
# held-out loss falls and exact-match accuracy rises; the exported directory loads with
# `flywheel score` and gives the learner's held-out loss; a run resumes from its checkpoint; the
# accuracy stop ends a run early. Usage: sft_test.sh MPIEXEC FLYWHEEL
set -uo pipefail
mpiexec=$1
flywheel=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
source "$(dirname "$0")/copy_task.sh"
copy_task_model "$flywheel" llama "$work/m" || fail "init-model"
copy_task_data "$work"
cat > "$work/sft.yaml" <<YAML
model: {path: $work/m, max_seq_len: 64}
tokenizer: {type: char, chat_template: none}
data: {train_path: $work/train.jsonl, eval_path: $work/eval.jsonl, seed: 3}
trainer: {total_steps: 150, lr: 3.0e-3, warmup_steps: 5, micro_batch_tokens: 256}
sft: {batch_size: 32, eval_every: 50, eval_max_new_tokens: 4}
checkpoint: {every_steps: 50, keep_last: 2}
logging: {run_dir: $work/run, sinks: [jsonl]}
cluster: {threads_per_process: 1}
YAML
run() { timeout 300 "$mpiexec" -np 2 --oversubscribe "$flywheel" sft "$work/sft.yaml" "$@" 2>&1; }
out=$(run) || fail "sft exited with $?: $out"
echo "$out" | tail -3
summary=$(grep "flywheel sft: 150 steps" <<<"$out") || fail "no summary: $out"
# held-out loss a -> b, accuracy c -> d
read -r loss0 loss1 acc0 acc1 < <(sed -E 's/.*loss ([0-9.]+) -> ([0-9.]+), accuracy ([0-9.]+) -> ([0-9.]+).*/\1 \2 \3 \4/' <<<"$summary")
awk -v a="$loss0" -v b="$loss1" 'BEGIN { exit !(b < a / 4) }' || fail "held-out loss $loss0 -> $loss1"
awk -v a="$acc0" -v b="$acc1" 'BEGIN { exit !(a < 0.2 && b > 0.8) }' || fail "accuracy $acc0 -> $acc1"
[[ -f "$work/run/hf/model.safetensors" && -f "$work/run/hf/char_tokenizer.json" ]] || fail "no export"
# The exported model, scored by `flywheel score`, gives the learner's held-out loss.
copy_task_score_input "$work/eval.jsonl" "$work/score_in.jsonl"
"$flywheel" score --model "$work/run/hf" -i "$work/score_in.jsonl" -o "$work/scored.jsonl" 2> /dev/null ||
  fail "score cannot load the export"
node -e '
  const fs = require("fs");
  let sum = 0, n = 0;
  for (const l of fs.readFileSync(process.argv[1], "utf8").trim().split("\n")) {
    const r = JSON.parse(l);
    for (const lp of r.logprobs.slice(-r.n)) { sum -= lp; ++n; }
  }
  const metrics = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse);
  const learner = metrics.filter(m => "eval/loss" in m.scalars).pop().scalars["eval/loss"];
  const scored = sum / n;
  console.log(`held-out loss: learner ${learner}, flywheel score on the export ${scored}`);
  if (Math.abs(scored - learner) > 1e-5) process.exit(1);' "$work/scored.jsonl" "$work/run/metrics.jsonl" ||
  fail "score and the learner disagree"
# Resume: 10 more steps from the last checkpoint.
out=$(run --set trainer.total_steps=160) || fail "resume exited with $?: $out"
grep -q "resumed from $work/run/checkpoints/step_150 at step 150" <<<"$out" || fail "did not resume: $out"
grep -q "flywheel sft: 160 steps" <<<"$out" || fail "no 160 steps: $out"
[[ "$(ls "$work/run/checkpoints")" == $'step_150\nstep_160' ]] || fail "keep_last: $(ls "$work/run/checkpoints")"
# bfloat16 compute (float32 master weights and reductions) trains the task to within noise of
# float32.
out=$(run --set checkpoint.resume=never --set trainer.param_dtype=bfloat16 \
      --set logging.run_dir="$work/run_bf16") || fail "bf16 run exited with $?: $out"
bf16=$(grep "flywheel sft: 150 steps" <<<"$out") || fail "no bf16 summary: $out"
read -r _ bloss _ bacc < <(sed -E 's/.*loss ([0-9.]+) -> ([0-9.]+), accuracy ([0-9.]+) -> ([0-9.]+).*/\1 \2 \3 \4/' <<<"$bf16")
echo "float32: held-out loss $loss1, accuracy $acc1; bfloat16: $bloss, $bacc"
awk -v f="$loss1" -v b="$bloss" -v acc="$bacc" 'BEGIN { exit !(b < 2 * f + 0.01 && acc > 0.8) }' ||
  fail "bfloat16 did not train like float32: $bf16"
# The accuracy stop, from scratch.
out=$(run --set checkpoint.resume=never --set sft.eval_every=10 --set sft.stop_at_accuracy=0.9 \
      --set logging.run_dir="$work/run2") || fail "stop run exited with $?: $out"
grep -q "stopped by held-out accuracy" <<<"$out" || fail "no early stop: $out"
grep -vq "150 steps" <<<"$(grep 'flywheel sft:' <<<"$out")" || fail "ran every step: $out"
# sft.eval_every_near_stop: every 10 steps, and the step after any evaluation at half the stop or
# above; the run stops at the first evaluation at or above it.
out=$(run --set checkpoint.resume=never --set sft.eval_every=10 --set sft.eval_every_near_stop=1 \
      --set sft.stop_at_accuracy=0.3 --set logging.run_dir="$work/run3") ||
  fail "near-stop run exited with $?: $out"
node -e '
  const fs = require("fs");
  const evals = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse)
    .filter(m => "eval/accuracy" in m.scalars).map(m => [m.step, m.scalars["eval/accuracy"]]);
  console.log("evaluations (step, accuracy):", JSON.stringify(evals));
  let per_step = 0;
  for (let i = 1; i < evals.length; ++i) {
    const [prev, acc] = evals[i - 1];
    const want = acc >= 0.15 ? prev + 1 : (Math.floor(prev / 10) + 1) * 10;
    if (evals[i][0] !== want) throw new Error(`evaluation at ${evals[i][0]}, want ${want}`);
    if (acc >= 0.15) ++per_step;
  }
  if (per_step === 0) throw new Error("no per-step evaluation near the stop");
  const stop = evals.findIndex(([, a]) => a >= 0.3);
  if (stop !== evals.length - 1) throw new Error("did not stop at the first evaluation >= 0.3");
' "$work/run3/metrics.jsonl" || fail "near-stop evaluations: $out"
echo "PASS"
