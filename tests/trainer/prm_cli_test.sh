#!/usr/bin/env bash
# `flywheel rm --process` on step-labelled answers to 2-digit additions (make-data addition-prm,
# a step per digit) with a tiny random model: the first step's loss is log 2 (a zero head), the
# training steps are learned, 1 rank and 2 ranks log the same metrics; the export is a token
# classifier (zero score.bias) that the process_reward_model reward loads and that judges the
# held-out answers as the learner did (the same outcome accuracy), pays each digit its step
# reward where it ends, and reduces to min / mean / last; bad records are named.
# Usage: prm_cli_test.sh MPIEXEC FLYWHEEL
set -uo pipefail
mpiexec=$1
flywheel=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/preference_task.sh"
"$flywheel" make-data addition-prm --digits 2 --train 400 --eval 64 --seed 5 \
  --out "$work/steps" > /dev/null || fail "make-data addition-prm"
head -c 300 "$work/steps/eval.jsonl"
cat > "$work/prm.yaml" <<YAML
model: {path: $work/m, max_seq_len: 16}
tokenizer: {type: char, chat_template: none}
data: {train_path: $work/steps/train.jsonl, eval_path: $work/steps/eval.jsonl, seed: 3}
trainer: {total_steps: 60, lr: 1.0e-2, warmup_steps: 2, micro_batch_tokens: 128}
rm: {batch_size: 16, eval_every: 20, separator: ""}
checkpoint: {every_steps: 20, keep_last: 1}
logging: {run_dir: $work/run, sinks: [jsonl]}
cluster: {threads_per_process: 1}
YAML
run() {  # ranks, then --set overrides
  local np=$1
  shift
  timeout 300 "$mpiexec" -np "$np" --oversubscribe "$flywheel" rm --process "$work/prm.yaml" "$@" 2>&1
}
out=$(run 2) || fail "rm --process exited with $?: $out"
summary=$(grep "flywheel rm --process: 60 steps" <<<"$out") || fail "no summary: $out"
echo "$summary"
grep -q "held-out step accuracy .* -> .*held-out outcome accuracy .*exported to $work/run/hf" \
  <<<"$summary" || fail "summary lacks the held-out figures or the export"
node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse)
    .filter(r => "prm/loss" in r.scalars);
  const mean = (rs, k) => rs.reduce((a, r) => a + r.scalars[k], 0) / rs.length;
  const [first, last] = [rows.slice(0, 10), rows.slice(-10)];
  console.log(`step 1 loss ${rows[0].scalars["prm/loss"]}; training steps: loss ${mean(first, "prm/loss").toFixed(3)} -> ${mean(last, "prm/loss").toFixed(3)}, accuracy ${mean(first, "prm/accuracy").toFixed(3)} -> ${mean(last, "prm/accuracy").toFixed(3)}`);
  if (Math.abs(rows[0].scalars["prm/loss"] - Math.log(2)) > 1e-6) process.exit(1);
  if (!(mean(last, "prm/loss") < mean(first, "prm/loss") - 0.05)) process.exit(2);' \
  "$work/run/metrics.jsonl" || fail "the zero head does not start at log 2, or nothing is learned"
grep -q '"architectures":\["Qwen2ForTokenClassification"\]' "$work/run/hf/config.json" &&
  grep -q '"num_labels":1' "$work/run/hf/config.json" || fail "not a token classifier: $(cat "$work/run/hf/config.json")"
grep -aq 'score.bias' "$work/run/hf/model.safetensors" || fail "no score.bias in the export"

# The export through the process_reward_model reward, on every held-out answer: a completion is
# judged all right when its lowest step probability is above 0.5, as the learner judged it.
node -e '
  const fs = require("fs");
  const out = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(l => {
    const r = JSON.parse(l);
    // The answer and its stop token (the last step, "<eos>": the tokenizer gives its id).
    return JSON.stringify({prompt: r.prompt, completion: r.completions.join(""), labels: r.labels});
  });
  fs.writeFileSync(process.argv[2], out.join("\n") + "\n");' "$work/steps/eval.jsonl" "$work/in.jsonl"
for reduce in steps min mean last; do
  cat > "$work/r_$reduce.yaml" <<YAML
rewards:
  functions:
    - {name: process_reward_model, weight: 1.0,
       params: {path: $work/run/hf, separator: "", reduce: $reduce, batch_size: 16}}
YAML
  "$flywheel" reward "$work/r_$reduce.yaml" -i "$work/in.jsonl" -o "$work/s_$reduce.jsonl" \
    --tokenizer "$work/m" > "$work/log_$reduce" 2>&1 || fail "process_reward_model ($reduce): $(cat "$work/log_$reduce")"
done
node -e '
  const fs = require("fs");
  const read = f => fs.readFileSync(f, "utf8").trim().split("\n").map(JSON.parse);
  const [steps, min, mean, last] = ["steps", "min", "mean", "last"].map(r => read(`${process.argv[1]}/s_${r}.jsonl`));
  const learner = read(process.argv[2]).filter(r => "eval/prm/outcome_accuracy" in r.scalars).pop().scalars;
  let right = 0;
  for (let i = 0; i < steps.length; ++i) {
    const s = steps[i], p = s.rewards["process_reward_model/min"], K = s.rewards["process_reward_model/steps"];
    if (K !== s.labels.length) throw new Error(`record ${i}: ${K} steps for ${s.labels.length} digits`);
    if ((p > 0.5) === s.labels.every(x => x)) ++right;
    // One step reward per digit, where it ends (the completion ids: one character each), summing
    // to the mean; min / mean / last are those reductions.
    if (JSON.stringify(s.step_ends) !== JSON.stringify(s.labels.map((_, k) => k + 1)))
      throw new Error(`record ${i}: step ends ${JSON.stringify(s.step_ends)}`);
    const sum = s.step_rewards.reduce((a, x) => a + x, 0);
    if (Math.abs(sum - s.reward) > 1e-9 || Math.abs(mean[i].reward - s.reward) > 1e-9 ||
        Math.abs(min[i].reward - p) > 1e-9 || min[i].reward > last[i].reward + 1e-9 ||
        "step_ends" in min[i])
      throw new Error(`record ${i}: steps ${s.reward} (sum ${sum}), mean ${mean[i].reward}, min ${min[i].reward}, last ${last[i].reward}`);
  }
  const acc = right / steps.length;
  console.log(`process_reward_model on the export: outcome accuracy ${acc}; the learner ${learner["eval/prm/outcome_accuracy"]}`);
  if (Math.abs(acc - learner["eval/prm/outcome_accuracy"]) > 1e-9) process.exit(1);' \
  "$work" "$work/run/metrics.jsonl" || fail "process_reward_model and the learner disagree"

# 1 rank and 2 ranks: the same metrics.
out=$(run 1 --set trainer.total_steps=8 --set trainer.lr=3e-3 --set logging.run_dir="$work/r1") ||
  fail "1 rank: $out"
out=$(run 2 --set trainer.total_steps=8 --set trainer.lr=3e-3 --set logging.run_dir="$work/r2") ||
  fail "2 ranks: $out"
same_metrics "$work/r1" "$work/r2" 40 || fail "1 and 2 ranks differ"

# Bad records are named.
printf '%s\n' '{"prompt": "1+1=", "completions": ["2", "3"], "labels": [true]}' > "$work/bad1.jsonl"
printf '%s\n' '{"prompt": "1+1=", "completions": ["2"], "labels": ["yes"]}' > "$work/bad2.jsonl"
out=$(run 1 --set data.train_path="$work/bad1.jsonl" --set logging.run_dir="$work/bad")
grep -q 'bad1.jsonl:1: "completions" has 2 steps and "labels" 1 labels' <<<"$out" ||
  fail "mismatched labels not named: $out"
out=$(run 1 --set data.train_path="$work/bad2.jsonl" --set logging.run_dir="$work/bad")
grep -q 'bad2.jsonl:1: "labels"\[0\] is "yes"; labels are true / false' <<<"$out" ||
  fail "a bad label not named: $out"
echo "PASS"
