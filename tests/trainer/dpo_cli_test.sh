#!/usr/bin/env bash
# `flywheel dpo` on preference pairs of 2-digit additions (make-data addition-pairs) with a tiny
# random model: held-out preference accuracy starts at 0.5 (policy = reference: ties) and rises;
# 1 rank and 2 ranks log the same metrics at every step (float32 tolerance); a run resumes from
# its checkpoint; SimPO needs no reference pass; bad pairs and options are named.
# Usage: dpo_cli_test.sh MPIEXEC FLYWHEEL
set -uo pipefail
mpiexec=$1
flywheel=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/preference_task.sh"
head -1 "$work/data/train.jsonl" | grep -q '"chosen":.*"rejected":' || fail "no pairs: $(head -1 "$work/data/train.jsonl")"
cat > "$work/dpo.yaml" <<YAML
model: {path: $work/m, max_seq_len: 16}
tokenizer: {type: char, chat_template: none}
data: {train_path: $work/data/train.jsonl, eval_path: $work/data/eval.jsonl, seed: 3}
trainer: {total_steps: 40, lr: 3.0e-3, warmup_steps: 2, micro_batch_tokens: 128}
dpo: {loss: sigmoid, beta: 0.5, batch_size: 16, eval_every: 10}
eval: {max_new_tokens: 4}
checkpoint: {every_steps: 10, keep_last: 2}
logging: {run_dir: $work/run, sinks: [jsonl]}
cluster: {threads_per_process: 1}
YAML
run() {  # ranks, then --set overrides
  local np=$1
  shift
  timeout 300 "$mpiexec" -np "$np" --oversubscribe "$flywheel" dpo "$work/dpo.yaml" "$@" 2>&1
}
out=$(run 2) || fail "dpo exited with $?: $out"
grep -q "reference log-probs of 464 pairs (the initial policy" <<<"$out" || fail "no reference pass: $out"
summary=$(grep "flywheel dpo: 40 steps" <<<"$out") || fail "no summary: $out"
echo "$summary"
read -r acc0 acc1 < <(sed -E 's/.*preference accuracy ([0-9.]+) -> ([0-9.]+).*/\1 \2/' <<<"$summary")
[[ "$acc0" == 0.500 ]] || fail "held-out preference accuracy starts at $acc0, not 0.500 (ties)"
# A random 32-wide model barely learns addition: the held-out pairs move a little, the training
# pairs (loss, accuracy) clearly.
awk -v a="$acc1" 'BEGIN { exit !(a >= 0.58) }' || fail "preference accuracy only $acc0 -> $acc1"
node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse)
    .filter(r => "dpo/loss" in r.scalars);
  const mean = (rs, k) => rs.reduce((a, r) => a + r.scalars[k], 0) / rs.length;
  const [first, last] = [rows.slice(0, 5), rows.slice(-10)];
  console.log(`training pairs: loss ${mean(first, "dpo/loss").toFixed(3)} -> ${mean(last, "dpo/loss").toFixed(3)}, accuracy ${mean(first, "rewards/accuracies").toFixed(3)} -> ${mean(last, "rewards/accuracies").toFixed(3)}`);
  if (!(mean(last, "dpo/loss") < mean(first, "dpo/loss") - 0.1)) process.exit(1);
  if (!(mean(last, "rewards/accuracies") >= 0.7)) process.exit(1);' "$work/run/metrics.jsonl" ||
  fail "the training pairs are not learned"
grep -q "greedy accuracy" <<<"$summary" || fail "no greedy accuracy: $summary"
[[ -f "$work/run/hf/model.safetensors" && -f "$work/run/hf/char_tokenizer.json" ]] || fail "no export"

# 1 rank and 2 ranks: the same metrics at every step.
out=$(run 1 --set trainer.total_steps=12 --set logging.run_dir="$work/r1") || fail "1 rank: $out"
out=$(run 2 --set trainer.total_steps=12 --set logging.run_dir="$work/r2") || fail "2 ranks: $out"
same_metrics "$work/r1" "$work/r2" 100 || fail "1 and 2 ranks differ"

# Resume: 4 more steps from the last checkpoint.
out=$(run 2 --set trainer.total_steps=44) || fail "resume exited with $?: $out"
grep -q "resumed from $work/run/checkpoints/step_40 at step 40" <<<"$out" || fail "did not resume: $out"
grep -q "flywheel dpo: 44 steps" <<<"$out" || fail "no 44 steps: $out"

# SimPO is reference-free: no reference pass.
out=$(run 1 --set dpo.loss=simpo --set trainer.total_steps=2 --set logging.run_dir="$work/simpo") ||
  fail "simpo exited with $?: $out"
grep -q "reference log-probs" <<<"$out" && fail "simpo computed a reference: $out"
grep -q "flywheel dpo: 2 steps" <<<"$out" || fail "simpo: $out"

# Records carrying their reference log-probs keep them: with every record carrying them, there
# is no reference pass.
node -e '
  const fs = require("fs");
  for (const f of ["train", "eval"]) {
    const lines = fs.readFileSync(`${process.argv[1]}/${f}.jsonl`, "utf8").trim().split("\n");
    fs.writeFileSync(`${process.argv[1]}/${f}_ref.jsonl`, lines.map(l =>
      JSON.stringify({...JSON.parse(l), ref_chosen_logps: -5, ref_rejected_logps: -6})).join("\n") + "\n");
  }' "$work/data"
out=$(run 1 --set trainer.total_steps=2 --set logging.run_dir="$work/ref" \
      --set data.train_path="$work/data/train_ref.jsonl" \
      --set data.eval_path="$work/data/eval_ref.jsonl") || fail "precomputed reference: $out"
grep -q "reference log-probs" <<<"$out" && fail "a reference pass despite precomputed log-probs: $out"

# Bad pairs are named by file and line; bad options by key.
printf '%s\n' '{"prompt": "1+1=", "chosen": "2", "rejected": "3"}' \
  '{"prompt": "1+2=", "chosen": "3"}' > "$work/bad.jsonl"
out=$(run 1 --set data.train_path="$work/bad.jsonl" --set logging.run_dir="$work/bad")
[[ $? != 0 ]] || fail "a pair without rejected was accepted"
grep -q "bad.jsonl:2: no \"rejected\"" <<<"$out" || fail "bad pair not named: $out"
printf '%s\n' '{"prompt": "1+1=", "chosen": "2", "rejected": "3", "ref_chosen_logps": -1}' \
  > "$work/bad.jsonl"
out=$(run 1 --set data.train_path="$work/bad.jsonl" --set logging.run_dir="$work/bad")
grep -q "bad.jsonl:1: \"ref_chosen_logps\" and \"ref_rejected_logps\" must both" <<<"$out" ||
  fail "half a reference not named: $out"
out=$("$flywheel" dpo "$work/dpo.yaml" --set dpo.loss=kto 2>&1)
[[ $? == 2 ]] || fail "dpo.loss=kto: exit $?"
grep -q "dpo.loss" <<<"$out" || fail "dpo.loss=kto not named: $out"
out=$("$flywheel" dpo "$work/dpo.yaml" --set dpo.loss=ipo --set dpo.label_smoothing=0.1 2>&1)
grep -q "label_smoothing" <<<"$out" || fail "label smoothing with ipo not named: $out"
echo "PASS"
