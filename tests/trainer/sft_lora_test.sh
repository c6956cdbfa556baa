#!/usr/bin/env bash
# `flywheel sft` with trainer.lora under mpirun -np 2 (copy the second letter: "ab:" -> "b"), on
# a base briefly trained in full: held-out loss falls and accuracy rises with the base frozen; the checkpoints hold the adapters only; the merged
# export (run/hf) and the PEFT adapter (`flywheel export --adapter`, loaded onto its base) score
# the held-out set to the same log-probs through `flywheel score`, which equal the learner's
# held-out loss; a run resumes its adapters. Usage: sft_lora_test.sh MPIEXEC FLYWHEEL
set -uo pipefail
mpiexec=$1
flywheel=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
source "$(dirname "$0")/copy_task.sh"
copy_task_model "$flywheel" qwen2 "$work/m" || fail "init-model"
copy_task_data "$work"
cat > "$work/sft.yaml" <<YAML
model: {path: $work/base, max_seq_len: 64}
tokenizer: {type: char, chat_template: none}
data: {train_path: $work/train.jsonl, eval_path: $work/eval.jsonl, seed: 3}
trainer: {total_steps: 60, lr: 1.0e-2, warmup_steps: 5, micro_batch_tokens: 256,
          lora: {rank: 8, alpha: 16, targets: [q_proj, v_proj, up_proj, down_proj]}}
sft: {batch_size: 32, eval_every: 60, eval_max_new_tokens: 4}
checkpoint: {every_steps: 30, keep_last: 2}
logging: {run_dir: $work/run, sinks: [jsonl]}
cluster: {threads_per_process: 1}
YAML
run() { timeout 300 "$mpiexec" -np 2 --oversubscribe "$flywheel" sft "$work/sft.yaml" "$@" 2>&1; }
# The base: a random model trained in full for 20 steps (a random model's frozen head and final
# norm cap its logits near uniform: adapters adapt a trained model).
out=$(run --set model.path="$work/m" --set trainer.lora.rank=0 --set trainer.total_steps=20 \
      --set trainer.lr=3.0e-3 --set checkpoint.every_steps=0 --set logging.run_dir="$work/run0") ||
  fail "base sft exited with $?: $out"
cp -r "$work/run0/hf" "$work/base"
out=$(run) || fail "sft exited with $?: $out"
echo "$out" | grep -E "memory per rank|flywheel sft:" | sed 's/^/  /'
summary=$(grep "flywheel sft: 60 steps" <<<"$out") || fail "no summary: $out"
read -r loss0 loss1 acc0 acc1 < <(sed -E 's/.*loss ([0-9.]+) -> ([0-9.]+), accuracy ([0-9.]+) -> ([0-9.]+).*/\1 \2 \3 \4/' <<<"$summary")
awk -v a="$loss0" -v b="$loss1" -v c="$acc0" -v d="$acc1" 'BEGIN { exit !(b < 0.9 * a && d > c + 0.3) }' ||
  fail "held-out loss $loss0 -> $loss1, accuracy $acc0 -> $acc1"
# The checkpoint: adapter units only (2 layers), and the base directory it reads.
state="$work/run/checkpoints/step_60/trainer_state.json"
node -e '
  const s = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const units = s.models.policy.map(u => u.name);
  if (JSON.stringify(units) !== JSON.stringify(["layers.0.lora", "layers.1.lora"]))
    throw new Error("units " + units);
  if (s.lora.policy.rank !== 8 || s.lora.policy.base_path !== process.argv[2])
    throw new Error("lora " + JSON.stringify(s.lora));' "$state" "$work/base" || fail "checkpoint contents"
"$flywheel" export "$work/run/checkpoints/step_60" "$work/adapter" --adapter > /dev/null ||
  fail "export --adapter"
[[ -f "$work/adapter/adapter_config.json" && -f "$work/adapter/adapter_model.safetensors" ]] ||
  fail "no PEFT files"
# The run itself ended with both: the merged model and the adapter.
grep -q "exported to $work/run/hf (merged) and $work/run/adapter (PEFT adapter)" <<<"$summary" ||
  fail "the run did not export its adapter: $summary"
cmp -s "$work/adapter/adapter_model.safetensors" "$work/run/adapter/adapter_model.safetensors" ||
  fail "the run's adapter differs from export --adapter's"
copy_task_score_input "$work/eval.jsonl" "$work/score_in.jsonl"
for model in "$work/run/hf" "$work/adapter" "$work/base"; do
  "$flywheel" score --model "$model" -i "$work/score_in.jsonl" -o "$work/scored_$(basename "$model").jsonl" \
    2> /dev/null || fail "score cannot load $model"
done
node -e '
  const fs = require("fs");
  const read = f => fs.readFileSync(f, "utf8").trim().split("\n").map(JSON.parse);
  const [merged, peft, base] = process.argv.slice(1, 4).map(read);
  let diff = 0, moved = 0, sum = 0, n = 0;
  merged.forEach((r, i) => r.logprobs.forEach((lp, t) => {
    diff = Math.max(diff, Math.abs(lp - peft[i].logprobs[t]));
    moved = Math.max(moved, Math.abs(lp - base[i].logprobs[t]));
  }));
  for (const r of merged) for (const lp of r.logprobs.slice(-r.n)) { sum -= lp; ++n; }
  const metrics = read(process.argv[4]);
  const learner = metrics.filter(m => "eval/loss" in m.scalars).pop().scalars["eval/loss"];
  console.log(`  max |log-prob(PEFT adapter) - log-prob(merged export)| = ${diff} (the adapters move ` +
              `them by up to ${moved.toFixed(3)}); held-out loss: learner ${learner}, ` +
              `score on the export ${sum / n}`);
  if (diff > 1e-5 || moved < 0.1 || Math.abs(sum / n - learner) > 1e-5) process.exit(1);' \
  "$work/scored_hf.jsonl" "$work/scored_adapter.jsonl" "$work/scored_base.jsonl" "$work/run/metrics.jsonl" ||
  fail "the PEFT adapter, the merged export and the learner disagree"
# Resume: 10 more steps from the last checkpoint's adapters.
out=$(run --set trainer.total_steps=70) || fail "resume exited with $?: $out"
grep -q "resumed from $work/run/checkpoints/step_60 at step 60" <<<"$out" || fail "did not resume: $out"
grep -q "flywheel sft: 70 steps" <<<"$out" || fail "no 70 steps: $out"
# A base without weights is refused, naming the option.
rm "$work/base/model.safetensors"
out=$(run --set checkpoint.resume=never --set logging.run_dir="$work/run2") && fail "a random base trained"
grep -q "trainer.lora trains adapters on frozen base weights" <<<"$out" || fail "no clear error: $out"
echo "PASS"
