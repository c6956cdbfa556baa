#!/usr/bin/env bash
# Held-out accuracy per step of two `flywheel train` runs in one plot (gnuplot), e.g. on-policy
# distillation against RL with exact match from the same SFT checkpoint (docs/preference.md):
#   examples/distill/compare.sh runs/quickstart/rl runs/distill docs/distill_vs_rl.png
# Usage: compare.sh RL_RUN_DIR DISTILL_RUN_DIR OUT.png
set -euo pipefail
[[ $# == 3 ]] || { echo "usage: compare.sh RL_RUN_DIR DISTILL_RUN_DIR OUT.png" >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "compare.sh: gnuplot is not installed" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in 1 2; do
  node -e '
    for (const l of require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")) {
      const r = JSON.parse(l);
      if ("eval/accuracy" in r.scalars) console.log(r.step, r.scalars["eval/accuracy"]);
    }' "${!i}/metrics.jsonl" > "$tmp/$i.dat"
done
last=$(tail -1 "$tmp/2.dat" | cut -d' ' -f1)
gnuplot <<GP
set terminal pngcairo size 900,500
set output "$3"
set title "Held-out greedy accuracy from the same SFT checkpoint"
set xlabel "step"
set ylabel "accuracy"
set yrange [0:1]
set xrange [0:$last]
set key left top
set grid
plot "$tmp/1.dat" with linespoints title "RL, exact match ($1)", \
     "$tmp/2.dat" with linespoints title "on-policy distillation ($2)"
GP
echo "wrote $3"
