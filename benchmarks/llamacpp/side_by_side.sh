#!/usr/bin/env bash
# flywheel vs llama.cpp: greedy decode tokens/s on the CPU, same weights (model-f32 / model-bf16
# and their GGUF conversions), batch 1 / 8 / 64, 1 and 2 threads. Prints one table at the end.
#
#   ./side_by_side.sh        # the full measurement: about an hour on the 2-core EPYC (no avx512):
#                            # flywheel bfloat16 runs through LibTorch there (~5 GFLOP/s, est. ~25 tok/s at
#                            # batch 64), ~45 min of it; BF16_BATCHES="1 8" or REPS=1 shortens it
#   NGEN=8 REPS=1 BATCHES="1 8" THREADS=1 DTYPES=float32 ./side_by_side.sh   # smoke test
#
# Settings (environment): DTYPES ("float32 bfloat16"), THREADS ("1 2"), BATCHES ("1 8 64"),
# BF16_BATCHES (default BATCHES: the batches for bfloat16 only),
# NGEN (128, new tokens per sequence), NPP (16, prompt tokens), REPS (3, best of REPS runs),
# ROLLOUT_BENCH (1: also run flywheel's rollout_bench, its own random tied-embedding 100M model),
# LLAMA_KV (match: KV cache f32 for float32 / bf16 for bfloat16, as flywheel's cache; or a
# ggml type such as f16, llama.cpp's default), FA (on: llama.cpp flash attention).
#
# How each number is made (every figure: best of REPS runs, interleaved: each repetition runs
# llama.cpp then flywheel at each batch in turn, so that both sample the same minutes of a machine
# whose speed drifts; decode tokens/s = sequences x decode steps / time of those steps, prefill
# excluded):
#   flywheel        `flywheel generate` on the model directory, BATCH distinct NPP-token prompts
#                   (one per line, --max-slots BATCH, greedy, --ignore-eos). Its own in-process
#                   timer ("N token(s) in S s": after load, covering prefill + every step +
#                   writing the JSONL) is read for --max-new-tokens NGEN (S_n) and for
#                   --max-new-tokens 1 (S_1: load-free prefill + first token + output), and
#                   decode tok/s = BATCH x (NGEN - 1) / (min S_n - min S_1).
#   llama.cpp       batch 1: llama-bench -p 0 -n NGEN -r 1, once per repetition (max of the
#                   avg_ts; KV f16 for float32: this llama-bench takes no f32 cache type);
#                   batch > 1: llama-batched-bench -npp NPP -ntg NGEN -npl BATCH, once per
#                   repetition (speed_tg = BATCH x NGEN / decode time, random distinct prompts,
#                   max over the repetitions). Column "llama bb" is llama-batched-bench at every
#                   batch, batch 1 included, as a cross-check of llama-bench.
#   rollout_bench   flywheel's own benchmark (--models 100M --steps NGEN): tokens/s of NGEN
#                   engine steps after a warm-up step, best of 3; ITS model is a random
#                   qwen2 32000/768/2048/12L/12H/4KV with TIED embeddings (100.1M params), not
#                   the 124.7M untied model above, so it reads ~98 MB (f32) less per step.
set -uo pipefail
# WORK: where setup.sh built llama.cpp and wrote the models (outside the repository).
WORK=${LLAMA_WORK:-$HOME/llamacpp}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
FW=${FLYWHEEL:-$REPO/build/flywheel}
RB=${ROLLOUT_BENCH_BIN:-$REPO/build/benchmarks/rollout_bench}
HERE=$WORK
LB=$HERE/build/bin/llama-bench
BB=$HERE/build/bin/llama-batched-bench
DTYPES=${DTYPES:-float32 bfloat16}
THREADS=${THREADS:-1 2}
BATCHES=${BATCHES:-1 8 64}
NGEN=${NGEN:-128}
NPP=${NPP:-16}
REPS=${REPS:-3}
ROLLOUT_BENCH=${ROLLOUT_BENCH:-1}
LLAMA_KV=${LLAMA_KV:-match}
FA=${FA:-on}
BF16_BATCHES=${BF16_BATCHES:-$BATCHES}
OUT=${OUT:-$HERE/runs/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
RES=$OUT/results.tsv
: > "$RES"
LOG=$OUT/log.txt
echo "raw outputs: $OUT"

# ---------------------------------------------------------------- machine
{
  echo "== machine"
  grep -m1 'model name' /proc/cpuinfo
  echo "cores: $(nproc)"
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  for f in avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16; do
    if grep -qw "$f" <<<"$flags"; then echo "  $f: yes"; else echo "  $f: no"; fi
  done
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)  (other work on the machine skews every number)"
  echo "settings: DTYPES='$DTYPES' THREADS='$THREADS' BATCHES='$BATCHES' BF16_BATCHES='$BF16_BATCHES' NGEN=$NGEN NPP=$NPP REPS=$REPS LLAMA_KV=$LLAMA_KV FA=$FA"
} | tee -a "$LOG"

maxb=1; for b in $BATCHES $BF16_BATCHES; do (( b > maxb )) && maxb=$b; done
CTX=$(( maxb * (NPP + NGEN + 16) ))
SEQ=$(( NPP + NGEN + 8 ))

# BATCH distinct prompts of NPP ids (deterministic)
prompts() {  # $1 batch -> file
  local f=$OUT/prompts-$1.jsonl
  python3 - "$1" "$NPP" > "$f" <<'PY'
import json, random, sys
b, n = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(1234)
for i in range(b):
    print(json.dumps({"prompt_ids": [r.randrange(3, 32000) for _ in range(n)]}))
PY
  echo "$f"
}

fw_time() {  # dir dtype threads batch new_tokens -> seconds (flywheel's own timer)
  local dir=$1 dt=$2 t=$3 b=$4 n=$5 in err
  in=$(prompts "$b")
  err=$OUT/fw-$dt-t$t-b$b-n$n.err
  local w0 w1
  w0=$(date +%s.%N)
  "$FW" generate --model "$dir" --dtype "$dt" --threads "$t" -i "$in" -o /dev/null \
      --max-new-tokens "$n" --temperature 0 --ignore-eos --max-slots "$b" --max-seq-len "$SEQ" \
      2> "$err"
  w1=$(date +%s.%N)
  local line; line=$(grep -E 'token\(s\) in' "$err" | tail -1)
  echo "flywheel $dt t=$t b=$b n=$n: $line (wall incl. load $(python3 -c "print(f'{$w1-$w0:.2f}')") s)" >> "$LOG"
  local toks; toks=$(sed -E 's/.* ([0-9]+) token\(s\) in.*/\1/' <<<"$line")
  if [[ "$toks" != "$(( b * n ))" ]]; then echo "flywheel: expected $((b*n)) tokens, got '$toks' ($err)" | tee -a "$LOG" >&2; echo nan; return; fi
  sed -E 's/.* token\(s\) in ([0-9.]+) s.*/\1/' <<<"$line"
}

for dt in $DTYPES; do
  case $dt in
    float32)  dir=$HERE/model-f32;  gguf=$HERE/model-f32.gguf;  kv=f32;  lbkv=f16 ;;
    bfloat16) dir=$HERE/model-bf16; gguf=$HERE/model-bf16.gguf; kv=bf16; lbkv=bf16 ;;
    *) echo "unknown dtype $dt"; exit 2 ;;
  esac
  if [[ $LLAMA_KV != match ]]; then kv=$LLAMA_KV; lbkv=$LLAMA_KV; fi
  bs=$BATCHES; [[ $dt == bfloat16 ]] && bs=$BF16_BATCHES
  for t in $THREADS; do
    echo "== $dt, $t thread(s)" | tee -a "$LOG"

    # The REPS repetitions are interleaved: each runs llama.cpp and then flywheel at every batch,
    # so that both sample the same minutes of a shared machine whose speed drifts (by 10-30% over
    # minutes on the VMs measured); each figure is the best of its REPS samples.
    lbj=$OUT/llama-bench-$dt-t$t.jsonl
    bbj=$OUT/batched-bench-$dt-t$t.jsonl
    : > "$lbj"; : > "$bbj"
    declare -A best_n=() best_1=()
    for ((r = 0; r < REPS; r++)); do
      for b in $bs; do
        if [[ $b == 1 ]]; then  # ---------------- llama.cpp batch 1: llama-bench
          "$LB" -m "$gguf" -p 0 -n "$NGEN" -t "$t" -r 1 -fa "$FA" -ctk "$lbkv" -ctv "$lbkv" \
              -o jsonl >> "$lbj" 2>> "$OUT/llama-bench-$dt-t$t.err"
        fi
        # ---------------- llama.cpp: llama-batched-bench (batch 1 too, as a cross-check)
        "$BB" -m "$gguf" -c "$CTX" -npp "$NPP" -ntg "$NGEN" -npl "$b" -t "$t" -tb "$t" -fa "$FA" \
            -ctk "$kv" -ctv "$kv" --output-format jsonl >> "$bbj" 2>> "$OUT/batched-bench-$dt-t$t.err"
        # ---------------- flywheel on the same model directory
        s=$(fw_time "$dir" "$dt" "$t" "$b" "$NGEN")
        best_n[$b]=$(python3 -c "print(min(float('${best_n[$b]:-inf}'), float('$s')))")
        s=$(fw_time "$dir" "$dt" "$t" "$b" 1)
        best_1[$b]=$(python3 -c "print(min(float('${best_1[$b]:-inf}'), float('$s')))")
      done
    done
    if grep -qw 1 <<<"$bs"; then
      v=$(python3 -c "import json,sys; print(max(json.loads(l)['avg_ts'] for l in open(sys.argv[1]) if l.strip()))" "$lbj" 2>/dev/null || echo nan)
      echo "llama-bench $dt t=$t: best tg$NGEN $v tok/s (KV $lbkv)" | tee -a "$LOG"
      printf '%s\t%s\t%s\t%s\t%s\n' "$dt" "$t" 1 llama_bench "$v" >> "$RES"
    fi
    python3 - "$bbj" "$dt" "$t" >> "$RES" <<'PY'
import json, sys
best = {}
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); best[r["pl"]] = max(best.get(r["pl"], 0), r["speed_tg"])
for pl, v in sorted(best.items()):
    print(f"{sys.argv[2]}\t{sys.argv[3]}\t{pl}\tllama_bb\t{v:.2f}")
PY
    grep -P "^$dt\t$t\t\d+\tllama_bb" "$RES" | awk -v kv="$kv" '{print "llama-batched-bench " $1 " t=" $2 " batch " $3 ": " $5 " tok/s (KV " kv ")"}' | tee -a "$LOG"
    for b in $bs; do
      v=$(python3 -c "
n, one = float('${best_n[$b]}'), float('${best_1[$b]}')
d = n - one
print(f'{$b * ($NGEN - 1) / d:.2f}' if d > 0 else 'nan')")
      echo "flywheel generate $dt t=$t batch $b: S_$NGEN=${best_n[$b]} s, S_1=${best_1[$b]} s -> $v decode tok/s" | tee -a "$LOG"
      printf '%s\t%s\t%s\t%s\t%s\n' "$dt" "$t" "$b" flywheel "$v" >> "$RES"
    done

    # ---------------- flywheel rollout_bench (its own model)
    if [[ $ROLLOUT_BENCH == 1 ]]; then
      o=$OUT/rollout_bench-$dt-t$t.txt
      "$RB" --threads "$t" --dtype "$dt" --steps "$NGEN" --batches "$(tr ' ' ',' <<<"$bs")" \
          --models 100M --no-extras > "$o" 2>&1
      awk -v dt="$dt" -v t="$t" '$1=="100M" && $3 ~ /^[0-9]+$/ {print dt "\t" t "\t" $3 "\trollout_bench\t" $4}' "$o" >> "$RES"
      grep -P "^$dt\t$t\t\d+\trollout_bench" "$RES" | awk '{print "rollout_bench " $1 " t=" $2 " batch " $3 ": " $5 " tok/s"}' | tee -a "$LOG"
    fi
  done
done

# ---------------------------------------------------------------- table
python3 - "$RES" "$BATCHES" <<'PY' | tee "$OUT/table.txt"
import sys
rows = {}
for l in open(sys.argv[1]):
    dt, t, b, what, v = l.split("\t")
    rows.setdefault((dt, int(t), int(b)), {})[what] = float(v)
def f(x): return "-" if x is None or x != x else f"{x:.1f}"
print()
print("decode tokens/s (all sequences together), best of runs; ratio = flywheel / llama.cpp")
hdr = f"{'dtype':9} {'thr':>3} {'batch':>5} | {'flywheel':>9} {'llama.cpp':>9} {'ratio':>6} | {'llama bb':>9} {'rollout_bench*':>14}"
print(hdr); print("-" * len(hdr))
for (dt, t, b), r in sorted(rows.items(), key=lambda k: (k[0][0] != "float32", k[0][1], k[0][2])):
    fw = r.get("flywheel")
    ll = r.get("llama_bench") if b == 1 else r.get("llama_bb")
    ratio = fw / ll if fw and ll and fw == fw and ll == ll else None
    print(f"{dt:9} {t:>3} {b:>5} | {f(fw):>9} {f(ll):>9} {('-' if ratio is None else f'{ratio:.2f}'):>6} | "
          f"{f(r.get('llama_bb')):>9} {f(r.get('rollout_bench')):>14}")
print("flywheel = `flywheel generate` on the same weights (BATCH x (NGEN-1) / (S_NGEN - S_1));")
print("llama.cpp = llama-bench at batch 1, llama-batched-bench above; llama bb = llama-batched-bench;")
print("* rollout_bench runs its own random tied-embedding 100M model, not these weights.")
PY
