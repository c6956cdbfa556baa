#!/usr/bin/env bash
# `flywheel rm` on preference pairs of 2-digit additions with a tiny random model: held-out
# pairwise accuracy starts at 0.5 (a zero value head: ties) and the training pairs are learned;
# 1 rank and 2 ranks log the same metrics; the export is a sequence classifier that the
# reward_model reward loads and that scores the held-out pairs as the learner's head did (mean
# rewards within 1e-5, the same pairwise accuracy); a pair's margin and the centering term reach
# the loss; bad margins are named. Usage: rm_cli_test.sh MPIEXEC FLYWHEEL
set -uo pipefail
mpiexec=$1
flywheel=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/preference_task.sh"
cat > "$work/rm.yaml" <<YAML
model: {path: $work/m, max_seq_len: 16}
tokenizer: {type: char, chat_template: none}
data: {train_path: $work/data/train.jsonl, eval_path: $work/data/eval.jsonl, seed: 3}
trainer: {total_steps: 60, lr: 1.0e-2, warmup_steps: 2, micro_batch_tokens: 128}
rm: {batch_size: 16, eval_every: 20}
checkpoint: {every_steps: 20, keep_last: 1}
logging: {run_dir: $work/run, sinks: [jsonl]}
cluster: {threads_per_process: 1}
YAML
run() {  # ranks, then --set overrides
  local np=$1
  shift
  timeout 300 "$mpiexec" -np "$np" --oversubscribe "$flywheel" rm "$work/rm.yaml" "$@" 2>&1
}
out=$(run 2) || fail "rm exited with $?: $out"
summary=$(grep "flywheel rm: 60 steps" <<<"$out") || fail "no summary: $out"
echo "$summary"
grep -q "held-out pairwise accuracy 0.500 -> " <<<"$summary" || fail "accuracy does not start at 0.500 (a zero head ties)"
grep -q "reference log-probs\|greedy accuracy" <<<"$out" && fail "a reward model has no reference or greedy accuracy: $out"
node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse)
    .filter(r => "rm/loss" in r.scalars);
  const mean = (rs, k) => rs.reduce((a, r) => a + r.scalars[k], 0) / rs.length;
  const [first, last] = [rows.slice(0, 10), rows.slice(-10)];
  console.log(`training pairs: loss ${mean(first, "rm/loss").toFixed(3)} -> ${mean(last, "rm/loss").toFixed(3)}, accuracy ${mean(first, "rewards/accuracies").toFixed(3)} -> ${mean(last, "rewards/accuracies").toFixed(3)}`);
  if (!(mean(last, "rm/loss") < mean(first, "rm/loss") - 0.05)) process.exit(1);
  if ("logps/chosen" in rows[0].scalars) process.exit(2);' "$work/run/metrics.jsonl" ||
  fail "the training pairs are not learned"
grep -q '"architectures":\["Qwen2ForSequenceClassification"\]' "$work/run/hf/config.json" &&
  grep -q '"num_labels":1' "$work/run/hf/config.json" || fail "not a classifier: $(cat "$work/run/hf/config.json")"

# The export through the reward_model reward: each held-out pair's chosen and rejected.
cat > "$work/rewards.yaml" <<YAML
rewards:
  functions:
    - {name: reward_model, weight: 1.0, params: {path: $work/run/hf, batch_size: 16}}
YAML
node -e '
  const fs = require("fs");
  const out = [];
  for (const l of fs.readFileSync(process.argv[1], "utf8").trim().split("\n")) {
    const r = JSON.parse(l);
    out.push(JSON.stringify({prompt: r.prompt, completion: r.chosen}));
    out.push(JSON.stringify({prompt: r.prompt, completion: r.rejected}));
  }
  fs.writeFileSync(process.argv[2], out.join("\n") + "\n");' "$work/data/eval.jsonl" "$work/in.jsonl"
"$flywheel" reward "$work/rewards.yaml" -i "$work/in.jsonl" -o "$work/scored.jsonl" > /dev/null 2>&1 ||
  fail "reward_model cannot score with the export"
node -e '
  const fs = require("fs");
  const s = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(l => JSON.parse(l).reward);
  const last = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse)
    .filter(r => "eval/rewards/chosen" in r.scalars).pop().scalars;
  let chosen = 0, rejected = 0, right = 0;
  for (let i = 0; i < s.length; i += 2) {
    chosen += s[i]; rejected += s[i + 1];
    right += s[i] - s[i + 1] > 1e-4 ? 1 : Math.abs(s[i] - s[i + 1]) <= 1e-4 ? 0.5 : 0;
  }
  const n = s.length / 2;
  const d = Math.max(Math.abs(chosen / n - last["eval/rewards/chosen"]),
                     Math.abs(rejected / n - last["eval/rewards/rejected"]));
  console.log(`reward_model on the export: chosen ${(chosen / n).toFixed(6)}, rejected ${(rejected / n).toFixed(6)}, accuracy ${right / n}; the learner: ${last["eval/rewards/chosen"].toFixed(6)}, ${last["eval/rewards/rejected"].toFixed(6)}, ${last["eval/rewards/accuracies"]}; largest difference ${d.toExponential(2)}`);
  if (d > 1e-5 || right / n !== last["eval/rewards/accuracies"]) process.exit(1);' \
  "$work/scored.jsonl" "$work/run/metrics.jsonl" || fail "reward_model and the learner disagree"

# 1 rank and 2 ranks: the same metrics (at a smaller lr: 1e-2 amplifies reduction-order noise).
out=$(run 1 --set trainer.total_steps=8 --set trainer.lr=3e-3 --set logging.run_dir="$work/r1") ||
  fail "1 rank: $out"
out=$(run 2 --set trainer.total_steps=8 --set trainer.lr=3e-3 --set logging.run_dir="$work/r2") ||
  fail "2 ranks: $out"
same_metrics "$work/r1" "$work/r2" 40 || fail "1 and 2 ranks differ"

# A margin and the centering term change the loss; a bad margin is named.
node -e '
  const fs = require("fs");
  const lines = fs.readFileSync(process.argv[1], "utf8").trim().split("\n");
  fs.writeFileSync(process.argv[2], lines.map(l => JSON.stringify({...JSON.parse(l), margin: 2})).join("\n") + "\n");' \
  "$work/data/train.jsonl" "$work/margin.jsonl"
loss_at() {  # run_dir step
  node -e '
    const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
    console.log(rows.find(r => r.step === +process.argv[2] && "rm/loss" in r.scalars).scalars["rm/loss"]);' \
    "$1/metrics.jsonl" "$2"
}
for v in plain margin center; do
  args=(--set trainer.total_steps=2 --set logging.run_dir="$work/$v")
  [[ $v == margin ]] && args+=(--set data.train_path="$work/margin.jsonl")
  [[ $v == center ]] && args+=(--set rm.center_coefficient=1)
  out=$(run 1 "${args[@]}") || fail "$v: $out"
done
plain=$(loss_at "$work/plain" 1) margin=$(loss_at "$work/margin" 1)
plain2=$(loss_at "$work/plain" 2) center2=$(loss_at "$work/center" 2)
echo "step-1 loss: plain $plain, margin 2 $margin; step-2 loss: plain $plain2, centering 1 $center2"
# A zero head gives r = 0 at step 1: -log sigmoid(0) = log 2; with margin 2, softplus(2). The
# centering term's gradient is 0 there, so at step 2 both runs hold the same weights and the
# centred loss is larger by mean (r_c + r_r)^2 > 0.
awk -v p="$plain" -v m="$margin" -v p2="$plain2" -v c2="$center2" 'BEGIN {
  exit !(p - log(2) < 1e-9 && log(2) - p < 1e-9 && m - log(1 + exp(2)) < 1e-9 &&
         log(1 + exp(2)) - m < 1e-9 && c2 > p2 + 1e-9) }' ||
  fail "margin / centering: $plain $margin $plain2 $center2"
printf '%s\n' '{"prompt": "1+1=", "chosen": "2", "rejected": "3", "margin": "big"}' > "$work/bad.jsonl"
out=$(run 1 --set data.train_path="$work/bad.jsonl" --set logging.run_dir="$work/bad")
grep -q 'bad.jsonl:1: "margin" must be a finite number' <<<"$out" || fail "bad margin not named: $out"
echo "PASS"
