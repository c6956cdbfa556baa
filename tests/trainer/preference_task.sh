# Sourced by dpo_cli_test.sh and rm_cli_test.sh: the tiny random Qwen2 model (character
# tokenizer) in $work/m and preference pairs of 2-digit additions (make-data addition-pairs, 400
# training, 64 held out) in $work/data, and same_metrics. Needs $flywheel, $work and fail().
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[[ $(id -u) == 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cat > "$work/c.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2,
 "max_position_embeddings": 32}
JSON
"$flywheel" init-model --config "$work/c.json" --out "$work/m" --char-tokenizer --seed 3 \
  > /dev/null || fail "init-model"
"$flywheel" make-data addition-pairs --digits 2 --train 400 --eval 64 --seed 5 \
  --out "$work/data" > /dev/null || fail "make-data addition-pairs"

# same_metrics A B MIN: every metric of run A's metrics.jsonl (rates aside) equals run B's within
# 2e-5 (relative above 1), at least MIN values compared; prints the largest difference.
same_metrics() {
  node -e '
    const fs = require("fs");
    const read = f => fs.readFileSync(f, "utf8").trim().split("\n").map(JSON.parse);
    const [a, b] = [read(process.argv[1]), read(process.argv[2])];
    if (a.length !== b.length) throw new Error(`${a.length} vs ${b.length} rows`);
    let worst = 0, compared = 0;
    for (let i = 0; i < a.length; ++i) {
      for (const [k, v] of Object.entries(a[i].scalars)) {
        if (k.endsWith("_per_s")) continue;
        const w = b[i].scalars[k];
        if (w === undefined) throw new Error(`step ${a[i].step}: ${k} missing in the second run`);
        const d = Math.abs(v - w) / Math.max(1, Math.abs(v));
        worst = Math.max(worst, d);
        ++compared;
        if (d > 2e-5) throw new Error(`step ${a[i].step}: ${k} ${v} vs ${w}`);
      }
    }
    if (compared < +process.argv[3]) throw new Error(`only ${compared} values compared`);
    console.log(`1 rank vs 2 ranks: ${compared} metric values, largest difference ${worst.toExponential(2)}`);' \
    "$1/metrics.jsonl" "$2/metrics.jsonl" "$3"
}
