#!/usr/bin/env bash
# Held-out greedy accuracy per step (eval/accuracy) of several runs in one plot (gnuplot), e.g.
# on-policy distillation or a judge's reward against RL with exact match from the same SFT
# checkpoint (docs/preference.md, docs/rewards.md):
#   examples/compare_accuracy.sh docs/distill_vs_rl.png \
#     "RL, exact match=runs/quickstart/rl" "on-policy distillation=runs/distill"
# Usage: compare_accuracy.sh OUT.png LABEL=RUN_DIR...  (the x range is the last run's)
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: compare_accuracy.sh OUT.png LABEL=RUN_DIR..." >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "compare_accuracy.sh: gnuplot is not installed" >&2; exit 1; }
out=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plots=()
i=0
for run in "$@"; do
  [[ "$run" == *=* ]] || { echo "compare_accuracy.sh: '$run' is not LABEL=RUN_DIR" >&2; exit 2; }
  label=${run%%=*} dir=${run#*=}
  [[ -f "$dir/metrics.jsonl" ]] || { echo "compare_accuracy.sh: no $dir/metrics.jsonl" >&2; exit 1; }
  i=$((i + 1))
  node -e '
    for (const l of require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")) {
      const r = JSON.parse(l);
      if ("eval/accuracy" in r.scalars) console.log(r.step, r.scalars["eval/accuracy"]);
    }' "$dir/metrics.jsonl" > "$tmp/$i.dat"
  plots+=("\"$tmp/$i.dat\" with linespoints title \"$label ($dir)\"")
done
last=$(tail -1 "$tmp/$i.dat" | cut -d' ' -f1)
joined=$(printf '%s, ' "${plots[@]}")
gnuplot <<GP
set terminal pngcairo size 900,500 noenhanced
set output "$out"
set title "Held-out greedy accuracy from the same SFT checkpoint"
set xlabel "step"
set ylabel "accuracy"
set yrange [0:1]
set xrange [0:$last]
set key left top
set grid
plot ${joined%, }
GP
echo "wrote $out"
