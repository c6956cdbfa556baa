#!/usr/bin/env bash
# End-to-end checks of the `flywheel` binary. Usage: cli_test.sh FLYWHEEL SOURCE_DIR CASE
set -uo pipefail
flywheel=$1
src=$2
case_name=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL ($case_name): $*" >&2; exit 1; }
# expect_exit CODE CMD...: runs CMD, keeps stdout+stderr in $out, checks the exit code.
expect_exit() {
  local want=$1; shift
  out=$("$@" 2>&1); local got=$?
  [[ $got -eq $want ]] || fail "exit $got (wanted $want) from: $*"$'\n'"$out"
}
expect_output() { grep -qF -- "$1" <<<"$out" || fail "output lacks '$1':"$'\n'"$out"; }

# A random tiny judge in $work/judge and two records to judge in $work/in.jsonl (judge cases).
make_judge() {
  cat > "$work/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2}
JSON
  expect_exit 0 "$flywheel" init-model --config "$work/config.json" --out "$work/judge" --char-tokenizer
  printf '%s\n' '{"prompt": "1+2=", "completion": "3", "answer": "3"}' \
    '{"prompt": "2+2=", "completion": "5", "answer": "4"}' > "$work/in.jsonl"
}

case "$case_name" in
  version)
    expect_exit 0 "$flywheel" version
    for s in "flywheel 0.1" "LibTorch " "gRPC 1." "Protobuf " "MPI " "CUDA: " "NCCL: "; do
      expect_output "$s"
    done ;;
  help)
    expect_exit 0 "$flywheel" --help
    subs=(version validate-config config-doc plot tokenize score export init-model generate buffer
          sft dpo rm reward train learner rollout eval make-data)
    for sub in "${subs[@]}"; do expect_output "$sub"; done
    for sub in "${subs[@]}"; do
      expect_exit 0 "$flywheel" "$sub" --help
      expect_output "Usage: flywheel $sub"
    done
    expect_exit 2 "$flywheel" no-such-command
    expect_exit 2 "$flywheel" ;;
  validate_quickstart)
    expect_exit 0 "$flywheel" validate-config "$src/configs/quickstart.yaml"
    expect_output "group_size: 8"
    expect_output "is valid" ;;
  validate_override)
    expect_exit 0 "$flywheel" validate-config "$src/configs/quickstart.yaml" \
      --set trainer.lr=0.5 --set rollout.stop='["###"]'
    expect_output "lr: 0.5"
    expect_output 'stop: ["###"]'
    # --set before the config takes one value each: the config stays the positional.
    expect_exit 0 "$flywheel" validate-config --set trainer.lr=0.25 --set trainer.total_steps=99 \
      "$src/configs/quickstart.yaml" --no-plugins
    expect_output "lr: 0.25"
    expect_output "total_steps: 99" ;;
  validate_preset)
    printf 'algorithm:\n  name: dapo\n  clip_low: 0.1\nrollout:\n  max_new_tokens: 100\n' > "$work/d.yaml"
    expect_exit 0 "$flywheel" validate-config "$work/d.yaml"
    expect_output "clip_high: 0.28"
    expect_output "clip_low: 0.1"
    expect_output "filter: nonzero_reward_std"
    expect_output "overlong_buffer_len: 20"
    printf 'algorithm:\n  name: grpo\n  policy_loss: ppo_clipp\n' > "$work/e.yaml"
    expect_exit 2 "$flywheel" validate-config "$work/e.yaml"
    expect_output "$work/e.yaml:3:16: algorithm.policy_loss: unknown policy_loss 'ppo_clipp'"
    expect_output "did you mean 'ppo_clip'?"
    printf 'environment:\n  name: calculater\n' > "$work/env.yaml"
    expect_exit 2 "$flywheel" validate-config "$work/env.yaml"
    expect_output "$work/env.yaml:2:9: environment.name: unknown environment 'calculater'"
    expect_output "did you mean 'calculator'?" ;;
  validate_typo)
    printf 'trainer:\n  total_steps: 3\n  lrr: 0.1\n' > "$work/typo.yaml"
    expect_exit 2 "$flywheel" validate-config "$work/typo.yaml"
    expect_output "$work/typo.yaml:3:3: trainer.lrr: unknown key; did you mean 'trainer.lr'?" ;;
  validate_bad_override)
    expect_exit 2 "$flywheel" validate-config "$src/configs/quickstart.yaml" --set trainer.lr=fast
    expect_output "--set trainer.lr=fast: trainer.lr: expected a finite number, got 'fast'" ;;
  validate_missing_config)
    expect_exit 2 "$flywheel" validate-config "$work/none.yaml"
    expect_output "no such file" ;;
  validate_missing_plugin)
    printf 'plugins: [./libmissing.so]\n' > "$work/p.yaml"
    expect_exit 2 "$flywheel" validate-config "$work/p.yaml"
    expect_output "$work/p.yaml:1:10: plugins: plugin file '$work/libmissing.so' does not exist" ;;
  validate_unknown_sink)
    printf 'logging:\n  sinks: [console, jsnol]\n' > "$work/s.yaml"
    expect_exit 2 "$flywheel" validate-config "$work/s.yaml"
    expect_output "logging.sinks: unknown metrics_sink 'jsnol'"
    expect_output "did you mean 'jsonl'?" ;;
  config_doc)
    expect_exit 0 "$flywheel" config-doc --output "$work/config.md"
    cmp -s "$work/config.md" "$src/docs/config.md" || fail "docs/config.md is out of date" ;;
  plot)
    mkdir -p "$work/run"
    for step in 1 2 3 4 5; do
      printf '{"step": %d, "wall_time": 1.0, "scalars": {"loss": %d.5, "reward": "nan"}}\n' \
        "$step" "$((10 - step))" >> "$work/run/metrics.jsonl"
    done
    printf '{"step": 6, "wall' >> "$work/run/metrics.jsonl"  # a torn last line
    expect_exit 0 "$flywheel" plot "$work/run" --metrics loss --output "$work/loss.png"
    expect_output "skipped 1 malformed line"
    [[ "$(head -c 8 "$work/loss.png" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]] ||
      fail "not a PNG"
    expect_exit 2 "$flywheel" plot "$work/run" --metrics los
    expect_output "unknown metric 'los'; known: loss; did you mean 'loss'?"
    expect_exit 2 "$flywheel" plot "$work/nothing" ;;
  model_tools)
    cat > "$work/config.json" <<'JSON'
{"model_type": "qwen3", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "tie_word_embeddings": true, "eos_token_id": 2}
JSON
    expect_exit 0 "$flywheel" init-model --config "$work/config.json" --out "$work/m" --seed 3 \
      --char-tokenizer
    expect_output "initialised qwen3"
    [[ -f "$work/m/model.safetensors" && -f "$work/m/char_tokenizer.json" ]] || fail "files missing"
    printf '{"text": "1+1=2"}\n{"ids": [5, 9, 11, 2], "tag": "kept"}\n' > "$work/in.jsonl"
    expect_exit 0 "$flywheel" score --model "$work/m" --input "$work/in.jsonl" \
      --output "$work/a.jsonl"
    node -e '
      const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
      if (lines.length !== 2) throw new Error("expected 2 lines");
      for (const l of lines) {
        if (l.logprobs.length !== l.ids.length - 1 || l.greedy.length !== l.ids.length) throw new Error("bad lengths");
        if (!l.logprobs.every((v) => v <= 0)) throw new Error("positive logprob");
      }
      if (lines[1].tag !== "kept" || lines[0].ids.length !== 5) throw new Error("record not kept");
    ' "$work/a.jsonl" || fail "score output is wrong: $(cat "$work/a.jsonl")"
    # Export reloads with identical log-probs; a bf16 export is marked and close.
    expect_exit 0 "$flywheel" export "$work/m" "$work/e"
    expect_exit 0 "$flywheel" score --model "$work/e" --input "$work/in.jsonl" \
      --output "$work/b.jsonl"
    cmp -s "$work/a.jsonl" "$work/b.jsonl" || fail "exported model scores differently"
    [[ -f "$work/e/char_tokenizer.json" ]] || fail "tokenizer not exported"
    expect_exit 0 "$flywheel" export "$work/m" "$work/e16" --dtype bfloat16
    grep -q '"torch_dtype":"bfloat16"' "$work/e16/config.json" || fail "dtype not recorded"
    # A grown model scores as the original until trained, with its tokenizer copied.
    expect_exit 0 "$flywheel" init-model --from "$work/m" --add-layers 2 --out "$work/g" --seed 4
    expect_output "grew qwen3 from 2 to 4 layers"
    grep -q '"num_hidden_layers":4' "$work/g/config.json" || fail "grown config has not 4 layers"
    [[ -f "$work/g/char_tokenizer.json" ]] || fail "tokenizer not copied to the grown model"
    expect_exit 0 "$flywheel" score --model "$work/g" --input "$work/in.jsonl" \
      --output "$work/g.jsonl"
    cmp -s "$work/a.jsonl" "$work/g.jsonl" || fail "the grown model scores differently"
    expect_exit 2 "$flywheel" init-model --from "$work/m" --out "$work/x"
    expect_output "--add-layers must be >= 1"
    expect_exit 2 "$flywheel" init-model --out "$work/x"
    expect_output "one of --config or --from is required"
    # Bad input.
    printf '{"ids": [5, 999]}\n' > "$work/bad.jsonl"
    expect_exit 2 "$flywheel" score --model "$work/m" --input "$work/bad.jsonl"
    expect_output "bad.jsonl:1: ids must be integers in [0, 128) for this model"
    printf '{"model_type": "qwen3"}' > "$work/broken.json"
    expect_exit 2 "$flywheel" init-model --config "$work/broken.json" --out "$work/x"
    expect_output "vocab_size: missing required key"
    expect_exit 2 "$flywheel" score --model "$work/nothing" --input "$work/in.jsonl"
    expect_output "cannot read model config" ;;
  make_data)
    # Every digit order writes correct sums; held-out pairs never appear in training; --reversed
    # is sum-lsd; the same seed writes the same files.
    for order in msd sum-lsd lsd; do
      expect_exit 0 "$flywheel" make-data addition --digits 3 --train 300 --eval 50 --seed 4 \
        --digit-order "$order" --out "$work/$order"
      expect_output "digit order $order"
    done
    node -e '
      const fs = require("fs");
      const read = (d, f) => fs.readFileSync(`${d}/${f}.jsonl`, "utf8").trim().split("\n").map(JSON.parse);
      const rev = (s) => s.split("").reverse().join("");
      for (const order of ["msd", "sum-lsd", "lsd"]) {
        const dir = `${process.argv[1]}/${order}`;
        const train = read(dir, "train"), held = read(dir, "eval");
        if (train.length !== 300 || held.length !== 50) throw new Error(`${order}: record counts`);
        const seen = new Set(train.map((r) => r.prompt));
        for (const r of held) if (seen.has(r.prompt)) throw new Error(`${order}: ${r.prompt} in both`);
        for (const r of [...train, ...held]) {
          const m = /^([0-9]{3})\+([0-9]{3})=$/.exec(r.prompt);
          if (!m) throw new Error(`${order}: prompt ${r.prompt}`);
          let [a, b] = [m[1], m[2]];
          if (order === "lsd") [a, b] = [rev(a), rev(b)];
          const sum = String(Number(a) + Number(b));
          const want = order === "msd" ? sum : rev(sum);
          if (r.answer !== want || r.response !== want) throw new Error(`${order}: ${r.prompt} -> ${r.answer}, want ${want}`);
        }
      }
    ' "$work" || fail "make-data output is wrong"
    expect_exit 0 "$flywheel" make-data addition --digits 3 --train 300 --eval 50 --seed 4 \
      --reversed --out "$work/reversed"
    cmp -s "$work/reversed/train.jsonl" "$work/sum-lsd/train.jsonl" || fail "--reversed is not sum-lsd"
    expect_exit 0 "$flywheel" make-data addition --digits 3 --train 300 --eval 50 --seed 4 \
      --digit-order lsd --out "$work/again"
    cmp -s "$work/again/eval.jsonl" "$work/lsd/eval.jsonl" || fail "same seed, different data"
    expect_exit 2 "$flywheel" make-data addition --digit-order backwards --out "$work/x"
    expect_exit 2 "$flywheel" make-data addition --reversed --digit-order lsd --out "$work/x"
    # Preference pairs: the addition task's prompts and answers (same seed), the answer chosen,
    # a near miss (one digit changed, same length, no leading 0) rejected.
    expect_exit 0 "$flywheel" make-data addition-pairs --digits 3 --train 300 --eval 50 --seed 4 \
      --digit-order lsd --out "$work/pairs"
    expect_output "as preference pairs"
    node -e '
      const fs = require("fs");
      const read = (d, f) => fs.readFileSync(`${d}/${f}.jsonl`, "utf8").trim().split("\n").map(JSON.parse);
      for (const f of ["train", "eval"]) {
        const plain = read(`${process.argv[1]}/lsd`, f), pairs = read(`${process.argv[1]}/pairs`, f);
        if (plain.length !== pairs.length) throw new Error(`${f}: counts`);
        pairs.forEach((p, i) => {
          if (p.prompt !== plain[i].prompt || p.answer !== plain[i].answer || p.chosen !== p.answer)
            throw new Error(`${f} ${i}: ${JSON.stringify(p)} vs ${JSON.stringify(plain[i])}`);
          const differ = [...p.chosen].filter((c, j) => c !== p.rejected[j]).length;
          if (p.rejected.length !== p.chosen.length || differ !== 1 || /^[0-9]+$/.test(p.rejected) === false ||
              (p.rejected.length > 1 && p.rejected.endsWith("0")))
            throw new Error(`${f} ${i}: rejected ${p.rejected} for ${p.chosen}`);
        });
      }' "$work" || fail "make-data addition-pairs output is wrong"
    # Judge examples: the addition task's prompts with an answer shown (the sum about half the
    # time), and the response: the sum, a mark per digit, the verdict.
    expect_exit 0 "$flywheel" make-data addition-judge --digits 3 --train 300 --eval 50 --seed 4 \
      --digit-order lsd --out "$work/judge"
    expect_output "as judge examples"
    node -e '
      const fs = require("fs");
      const read = (d, f) => fs.readFileSync(`${d}/${f}.jsonl`, "utf8").trim().split("\n").map(JSON.parse);
      let yes = 0, n = 0;
      for (const f of ["train", "eval"]) {
        const plain = read(`${process.argv[1]}/lsd`, f), judge = read(`${process.argv[1]}/judge`, f);
        if (plain.length !== judge.length) throw new Error(`${f}: counts`);
        judge.forEach((j, i) => {
          const shown = j.prompt.slice(0, j.prompt.length - plain[i].prompt.length - 1);
          const [sum, marks, verdict] = j.response.split(" ");
          let want = "";
          for (let k = 0; k < Math.max(sum.length, shown.length); ++k) want += sum[k] === shown[k] ? "=" : "x";
          if (j.prompt !== `${shown}|${plain[i].prompt}` || sum !== plain[i].answer ||
              marks !== want || verdict !== (shown === sum ? "yes" : "no") || j.answer !== j.response ||
              !/^[0-9]+$/.test(shown))
            throw new Error(`${f} ${i}: ${JSON.stringify(j)} for ${JSON.stringify(plain[i])}`);
          yes += verdict === "yes";
          ++n;
        });
      }
      if (yes < 0.4 * n || yes > 0.6 * n) throw new Error(`${yes} of ${n} say yes`);
    ' "$work" || fail "make-data addition-judge output is wrong" ;;
  generate)
    cat > "$work/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2}
JSON
    expect_exit 0 "$flywheel" init-model --config "$work/config.json" --out "$work/m" --char-tokenizer
    printf '{"prompt": "2+2=", "id": "a"}\n{"prompt_ids": [5, 6, 7]}\n' > "$work/p.jsonl"
    for run in 1 2; do
      expect_exit 0 "$flywheel" generate --model "$work/m" -i "$work/p.jsonl" -o "$work/g$run.jsonl" \
        -n 3 --max-new-tokens 5 --temperature 0.9 --top-p 0.9 --seed 4
    done
    cmp -s "$work/g1.jsonl" "$work/g2.jsonl" || fail "same seed, different generations"
    node -e '
      const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
      if (lines.length !== 2 || lines[0].id !== "a") throw new Error("records");
      for (const l of lines) {
        if (l.completions.length !== 3) throw new Error("n");
        for (const c of l.completions) {
          const k = c.ids.length;
          if (k < 1 || k > 5 || c.logprobs.length !== k || c.versions.length !== k) throw new Error("lengths");
          if (typeof c.text !== "string" || !["stop", "length"].includes(c.finish_reason)) throw new Error("fields");
          if (c.finish_reason === "stop" && c.ids[k - 1] !== 2) throw new Error("stop without eos");
        }
      }
      if (lines[0].prompt_ids.join() !== "23,16,23,34") throw new Error("prompt ids " + lines[0].prompt_ids);
    ' "$work/g1.jsonl" || fail "generate output is wrong: $(cat "$work/g1.jsonl")"
    printf '{"prompt_ids": [5, 700]}\n' > "$work/bad.jsonl"
    expect_exit 2 "$flywheel" generate --model "$work/m" -i "$work/bad.jsonl"
    expect_output "bad.jsonl:1: request '0': prompt token 1 has id 700, outside the vocabulary"
    expect_exit 2 "$flywheel" generate --model "$work/m" -i "$work/p.jsonl" --max-seq-len 4
    expect_output "leaves no room in the context of 4 tokens" ;;
  eval)
    # flywheel eval on records whose answers are the model's own greedy completions (3 of 6) or
    # unreachable (longer than max_new_tokens): both judges give 0.5, and k near-greedy samples
    # give pass@k = mean@k = 0.5.
    cat > "$work/config.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2}
JSON
    expect_exit 0 "$flywheel" init-model --config "$work/config.json" --out "$work/m" --char-tokenizer --seed 5
    for p in "1+2=" "3+4=" "5+6=" "7+8=" "9+1=" "2+3="; do echo "{\"prompt\": \"$p\"}"; done > "$work/p.jsonl"
    expect_exit 0 "$flywheel" generate --model "$work/m" -i "$work/p.jsonl" -o "$work/g.jsonl" \
      --temperature 0 --max-new-tokens 4
    node -e '
      const fs = require("fs");
      const lines = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
      const prompts = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse);
      const out = prompts.map((p, i) => JSON.stringify(
          {prompt: p.prompt, answer: i < 3 ? lines[i].completions[0].text.trim() : "not reachable"}));
      fs.writeFileSync(process.argv[3], out.join("\n") + "\n");' "$work/g.jsonl" "$work/p.jsonl" "$work/e.jsonl"
    cat > "$work/c.yaml" <<YAML
model: {path: $work/m, max_seq_len: 16}
tokenizer: {type: char, chat_template: none}
rollout: {max_new_tokens: 4}
rewards: {functions: [{name: exact_match}]}
YAML
    expect_exit 0 "$flywheel" eval "$work/m" --config "$work/c.yaml" --data "$work/e.jsonl" \
      --set eval.judge=answer
    expect_output '"records":6'
    expect_output '"judge":"answer"'
    expect_output '"accuracy":0.5'
    expect_exit 0 "$flywheel" eval "$work/m" --config "$work/c.yaml" --data "$work/e.jsonl"
    expect_output '"judge":"rewards"'
    expect_output '"accuracy":0.5'
    expect_output '"reward/mean":0.5'
    expect_exit 0 "$flywheel" eval "$work/m" --config "$work/c.yaml" --data "$work/e.jsonl" \
      --set eval.samples=3 --set eval.temperature=1e-5
    expect_output '"pass@3":0.5'
    expect_output '"mean@3":0.5'
    expect_exit 0 "$flywheel" eval "$work/m" --config "$work/c.yaml" --data "$work/e.jsonl" \
      --set eval.samples=8 --set eval.seed=3
    a=$(grep -o '"pass@8":[0-9.e-]*' <<<"$out")
    expect_exit 0 "$flywheel" eval "$work/m" --config "$work/c.yaml" --data "$work/e.jsonl" \
      --set eval.samples=8 --set eval.seed=3
    [[ "$(grep -o '"pass@8":[0-9.e-]*' <<<"$out")" == "$a" && -n "$a" ]] || fail "pass@8 not reproducible"
    expect_exit 2 "$flywheel" eval "$work/m" --config "$work/c.yaml" --data "$work/e.jsonl" \
      --set eval.judge=rewards --set 'rewards.functions=[]'
    expect_output "eval.judge is rewards but rewards.functions is empty" ;;
  make_data_calculator)
    # Products of a 3-digit and a 2-digit number; held-out pairs never in training; sft.jsonl is
    # each demonstration episode's two model turns, the second's prompt the stream so far.
    expect_exit 0 "$flywheel" make-data calculator --train 300 --eval 50 --demos 20 --seed 4 \
      --out "$work/c"
    expect_output "20 demonstration episodes"
    node -e '
      const fs = require("fs");
      const read = (f) => fs.readFileSync(`${process.argv[1]}/${f}.jsonl`, "utf8").trim().split("\n").map(JSON.parse);
      const train = read("train"), held = read("eval"), sft = read("sft");
      if (train.length !== 300 || held.length !== 50 || sft.length !== 40) throw new Error("counts");
      const seen = new Set(train.map((r) => r.prompt));
      for (const r of held) if (seen.has(r.prompt)) throw new Error(`${r.prompt} in both`);
      for (const r of [...train, ...held]) {
        const m = /^([0-9]{3})\*([0-9]{2})=$/.exec(r.prompt);
        if (!m || r.answer !== String(m[1] * m[2])) throw new Error(`${r.prompt} -> ${r.answer}`);
      }
      for (let i = 0; i < 40; i += 2) {
        const [call, answer] = [sft[i], sft[i + 1]];
        const expr = call.prompt.slice(0, -1), product = String(eval(expr));
        if (call.response !== `<calc>${expr}</calc>`) throw new Error(`call ${call.response}`);
        if (answer.prompt !== `${call.prompt}${call.response}<result>${product}</result>` ||
            answer.response !== product) throw new Error(`answer ${JSON.stringify(answer)}`);
      }
    ' "$work/c" || fail "make-data calculator output is wrong"
    expect_exit 0 "$flywheel" validate-config "$src/configs/quickstart_calculator.yaml"
    expect_output "name: calculator" ;;
  make_data_guess)
    # The guess_number game: targets in [1, max]; answers zero-padded like every guess; sft.jsonl
    # replays binary search as the environment answers it, one record per model turn.
    expect_exit 0 "$flywheel" make-data guess --max 16 --train 50 --eval 10 --demos 30 --seed 4 \
      --out "$work/g"
    expect_output "30 binary-search demonstration episodes"
    node -e '
      const fs = require("fs");
      const read = (f) => fs.readFileSync(`${process.argv[1]}/${f}.jsonl`, "utf8").trim().split("\n").map(JSON.parse);
      const train = read("train"), held = read("eval"), sft = read("sft");
      if (train.length !== 50 || held.length !== 10) throw new Error("counts");
      for (const r of [...train, ...held]) {
        if (r.prompt !== "guess 1-16:" || !(r.target >= 1 && r.target <= 16) ||
            r.answer !== String(r.target).padStart(2, "0")) throw new Error(JSON.stringify(r));
      }
      let episodes = 0;
      for (let i = 0; i < sft.length;) {  // an episode: prompts extend each other until "correct"
        let [lo, hi] = [1, 16];
        if (sft[i].prompt !== "guess 1-16:") throw new Error("episode start " + sft[i].prompt);
        ++episodes;
        for (;;) {
          const want = String(Math.floor((lo + hi) / 2)).padStart(2, "0");
          if (sft[i].response !== want) throw new Error(`guess ${sft[i].response}, want ${want}`);
          const next = sft[i + 1];
          if (!next || next.prompt === "guess 1-16:") { ++i; break; }
          const reply = next.prompt.slice(sft[i].prompt.length + 2);
          if (reply === "higher") lo = +want + 1; else if (reply === "lower") hi = +want - 1;
          else throw new Error("reply " + reply);
          ++i;
        }
      }
      if (episodes !== 30) throw new Error(`${episodes} episodes`);
    ' "$work/g" || fail "make-data guess output is wrong"
    expect_exit 0 "$flywheel" validate-config "$src/configs/guess_number.yaml"
    expect_exit 2 "$flywheel" make-data guess --max 1 --out "$work/x"
    expect_output "the maximum must be in [2, 1000000]" ;;
  episodes)
    # generate --environment and eval with an environment: guess_number answers every 4-token
    # turn of the (random) model, three turns; each token carries its source and turn.
    cat > "$work/config.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2,
 "max_position_embeddings": 160}
JSON
    expect_exit 0 "$flywheel" init-model --config "$work/config.json" --out "$work/m" --char-tokenizer --seed 5
    printf '{"prompt": "guess: ", "answer": "7"}\n{"prompt": "again: ", "answer": "7"}\n' > "$work/p.jsonl"
    expect_exit 0 "$flywheel" generate --model "$work/m" -i "$work/p.jsonl" -o "$work/g.jsonl" \
      --environment guess_number --env-param max=1000000 --max-turns 3 --turn-max-new-tokens 4 \
      --max-new-tokens 120 --max-seq-len 160 --ignore-eos -n 2 --temperature 0.8 --seed 3
    node -e '
      const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
      if (lines.length !== 2) throw new Error("records");
      for (const l of lines) for (const c of l.completions) {
        const n = c.ids.length;
        if (c.sources.length !== n || c.turns.length !== n) throw new Error("per-token fields");
        const model = c.sources.map((s, k) => s === "model" ? c.turns[k] : -1).filter((t) => t >= 0);
        if (model.join() !== "0,0,0,0,1,1,1,1,2,2,2,2") throw new Error("model turns " + model);
        if (!c.sources.includes("environment") || c.sources[0] !== "model") throw new Error("sources");
        // A turn with a number is a guess (a tool call); one without is told to guess.
        if (c.turn_rewards.length !== 3 || !(c.tool_calls >= 0 && c.tool_calls <= 3)) throw new Error("turn fields");
        if (c.finish_reason !== "length") throw new Error(c.finish_reason);
        if (!/guess an integer|higher|lower/.test(c.text)) throw new Error("text " + c.text);
      }
    ' "$work/g.jsonl" || fail "generate --environment output is wrong: $(head -c 600 "$work/g.jsonl")"
    expect_exit 2 "$flywheel" generate --model "$work/m" -i "$work/p.jsonl" --environment nope
    expect_output "nope"
    expect_exit 2 "$flywheel" generate --model "$work/m" -i "$work/p.jsonl" \
      --environment guess_number --env-param max
    expect_output "--env-param 'max' is not key=value"
    cat > "$work/c.yaml" <<YAML
model: {path: $work/m, max_seq_len: 160}
tokenizer: {type: char, chat_template: none}
rollout: {max_new_tokens: 120}
environment: {name: guess_number, max_turns: 3, turn_max_new_tokens: 4, params: {max: "1000000"}}
YAML
    expect_exit 0 "$flywheel" eval "$work/m" --config "$work/c.yaml" --data "$work/p.jsonl" \
      --set eval.judge=answer
    expect_output '"records":2'
    expect_output '"turns/mean":3'
    expect_output '"tool_calls/mean":' ;;
  weight_transport_alone)
    # weight_sync.transport mpi needs the workers inside the learners' mpirun: a worker started
    # on its own, or a learner job without rollout ranks, is refused at start, saying why.
    printf '{"model_type": "qwen2", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2}' > "$work/c.json"
    expect_exit 0 "$flywheel" init-model --config "$work/c.json" --out "$work/m" --char-tokenizer
    expect_exit 0 "$flywheel" make-data addition --digits 1 --train 8 --eval 2 --out "$work/d"
    cat > "$work/c.yaml" <<YAML
model: {path: $work/m, max_seq_len: 16}
tokenizer: {type: char, chat_template: none}
data: {train_path: $work/d/train.jsonl}
rollout: {group_size: 2, max_new_tokens: 2}
trainer: {total_steps: 1, groups_per_step: 1}
rewards: {functions: [{name: exact_match}]}
weight_sync: {transport: mpi}
logging: {run_dir: $work/run, sinks: [jsonl]}
YAML
    env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK \
      "$flywheel" rollout "$work/c.yaml" --controller 127.0.0.1:1 > "$work/r.log" 2>&1
    [[ $? -ne 0 ]] || fail "a lone worker with transport mpi started"
    out=$(cat "$work/r.log")
    expect_output "weight_sync.transport mpi needs this worker to be a rank of the learners' MPMD mpirun"
    expect_exit 1 timeout 60 "$flywheel" learner "$work/c.yaml"
    expect_output "weight_sync.transport mpi sends weights to the rollout ranks of the learners' MPMD mpirun, and this job has none" ;;
  generate_no_tokenizer)
    # No tokenizer files: ids only (no text, no text_error); stop strings are refused.
    printf '{"model_type": "llama", "vocab_size": 50, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4}' > "$work/c.json"
    expect_exit 0 "$flywheel" init-model --config "$work/c.json" --out "$work/m"
    printf '{"prompt_ids": [5, 6, 7]}\n' > "$work/p.jsonl"
    expect_exit 0 "$flywheel" generate --model "$work/m" -i "$work/p.jsonl" -o "$work/g.jsonl" \
      -n 2 --max-new-tokens 4 --ignore-eos
    node -e '
      const l = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
      for (const c of l.completions) {
        if ("text" in c || "text_error" in c || "error" in c) throw new Error(JSON.stringify(c));
        if (c.ids.length !== 4) throw new Error("ids");
      }' "$work/g.jsonl" || fail "ids-only output is wrong: $(cat "$work/g.jsonl")"
    expect_exit 2 "$flywheel" generate --model "$work/m" -i "$work/p.jsonl" --stop "###"
    expect_output "--stop strings need a tokenizer"
    printf '{"prompt": "hi"}\n' > "$work/t.jsonl"
    expect_exit 2 "$flywheel" generate --model "$work/m" -i "$work/t.jsonl"
    expect_output "t.jsonl:1: text prompts need a tokenizer" ;;
  generate_invalid_lines)
    # Every bad line is reported with its number; nothing is generated unless --skip-invalid.
    printf '{"model_type": "llama", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4}' > "$work/c.json"
    expect_exit 0 "$flywheel" init-model --config "$work/c.json" --out "$work/m"
    printf '%s\n' '{"prompt_ids": [5, 6, 7], "k": 1}' '{"prompt_ids": [5, 700]}' 'not json' \
      '{"prompt_ids": [8, 9], "k": 4}' '{"nothing": 1}' > "$work/p.jsonl"
    expect_exit 2 "$flywheel" generate --model "$work/m" -i "$work/p.jsonl" -o "$work/g.jsonl"
    expect_output "p.jsonl:2: request '1': prompt token 1 has id 700, outside the vocabulary"
    expect_output "p.jsonl:3: "
    expect_output "p.jsonl:5: expected \"prompt\", \"messages\" or \"prompt_ids\""
    expect_output "3 of 5 input line(s) are invalid; nothing was generated"
    [[ ! -e "$work/g.jsonl" ]] || fail "output written although lines were invalid"
    expect_exit 0 "$flywheel" generate --model "$work/m" -i "$work/p.jsonl" -o "$work/g.jsonl" \
      --skip-invalid --max-new-tokens 3
    expect_output "3 invalid line(s) skipped"
    node -e '
      const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
      if (lines.length !== 5) throw new Error("5 records expected");
      for (const i of [0, 3]) if (lines[i].completions.length !== 1 || "error" in lines[i]) throw new Error("line " + i);
      if (lines[0].k !== 1 || lines[3].k !== 4) throw new Error("order");
      for (const [i, n] of [[1, 2], [2, 3], [4, 5]]) {
        if (!lines[i].error.includes("p.jsonl:" + n + ": ") || "completions" in lines[i]) throw new Error("line " + i);
      }' "$work/g.jsonl" || fail "--skip-invalid output is wrong: $(cat "$work/g.jsonl")" ;;
  reward)
    # The example of docs/rewards.md: math + format_regex + repetition_penalty.
    expect_exit 0 "$flywheel" reward "$src/examples/rewards/rewards.yaml" \
      -i "$src/examples/rewards/completions.jsonl" -o "$work/s.jsonl"
    expect_output "6 record(s) in"
    expect_output "reward: mean 0.5000"
    expect_output "errors: 1 call(s) (1 record(s)); timeouts: 0; invalid lines: 0"
    node -e '
      const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
      const want = [1.1, 1.1, 1.0, 0.1, -0.3, 0];
      if (lines.length !== 6) throw new Error("6 records expected");
      lines.forEach((l, i) => {
        if (Math.abs(l.reward - want[i]) > 1e-9) throw new Error("record " + i + ": " + JSON.stringify(l));
      });
      if (!lines[5].reward_errors[0].includes("needs the key \x27answer\x27")) throw new Error("error text");
      if (lines[0].rewards["math/format"] !== 1 || lines[4].rewards["math/format"] !== 0) throw new Error("format");
    ' "$work/s.jsonl" || fail "scores are wrong: $(cat "$work/s.jsonl")"
    # Bad lines keep their place as errors; the rest is scored; exit 1.
    printf '%s\n' '{"completion": "\\boxed{2}", "answer": "2"}' 'not json' '{"answer": "2"}' \
      '{"completion": "#### 3", "answer": "3"}' > "$work/bad.jsonl"
    expect_exit 1 "$flywheel" reward "$src/examples/rewards/rewards.yaml" -i "$work/bad.jsonl" \
      -o "$work/bad_out.jsonl"
    expect_output "bad.jsonl:3: needs \"completion\": a string"
    expect_output "2 invalid line(s)"
    [[ $(wc -l < "$work/bad_out.jsonl") -eq 4 ]] || fail "4 output lines expected"
    grep -q '"error"' <(sed -n 2p "$work/bad_out.jsonl") || fail "line 2 is not an error record"
    # An unknown function option is a config error naming the function.
    printf 'rewards:\n  functions:\n    - {name: math, params: {tolerence: 0.1}}\n' > "$work/typo.yaml"
    expect_exit 1 "$flywheel" reward "$work/typo.yaml" -i "$work/bad.jsonl" -o "$work/x.jsonl"
    expect_output "rewards.functions[0] (math): reward 'math': unknown option 'tolerence'"
    expect_output "did you mean 'tolerance'?"
    printf 'rewards:\n  functions:\n    - name: mth\n' > "$work/name.yaml"
    expect_exit 2 "$flywheel" validate-config "$work/name.yaml"
    expect_output "name.yaml:3:13: rewards.functions[0].name: unknown reward 'mth'"
    expect_output "did you mean 'math'?" ;;
  judge)
    # llm_judge through `flywheel reward` (the CLI registers it): a random judge's P(yes) for
    # every record, the agreement with exact_match, and its garbage labels scored the fallback,
    # each counted; a missing judge is an error at start naming it.
    make_judge
    judge_config() {  # $1: verdict
      printf 'rewards:\n  fallback_score: -1\n  functions:\n    - {name: exact_match, weight: 0}\n    - name: llm_judge\n      params: {path: %s, template: "{prompt}{completion}?", verdict: %s}\n' \
        "$work/judge" "$1" > "$work/$1.yaml"
    }
    judge_config yes_prob
    expect_exit 0 "$flywheel" reward "$work/yes_prob.yaml" -i "$work/in.jsonl" -o "$work/y.jsonl"
    expect_output "llm_judge/agreement/exact_match: mean"
    expect_output "errors: 0 call(s)"
    node -e '
      const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
      for (const l of lines) {
        const r = l.rewards;
        if (!(r.llm_judge > 0 && r.llm_judge < 1) || r["llm_judge/verdict"] !== r.llm_judge ||
            !(r["llm_judge/latency_s"] >= 0) || ![0, 1].includes(r["llm_judge/agreement/exact_match"]))
          throw new Error(JSON.stringify(l));
      }' "$work/y.jsonl" || fail "judge scores are wrong: $(cat "$work/y.jsonl")"
    judge_config label  # a random judge writes no "yes" or "no"
    expect_exit 0 "$flywheel" reward "$work/label.yaml" -i "$work/in.jsonl" -o "$work/l.jsonl"
    expect_output "errors: 2 call(s) (2 record(s))"
    grep -q "holds none of the labels yes, no" "$work/l.jsonl" || fail "no label error: $(cat "$work/l.jsonl")"
    sed -i "s|$work/judge|$work/nowhere|" "$work/yes_prob.yaml"
    expect_exit 1 "$flywheel" reward "$work/yes_prob.yaml" -i "$work/in.jsonl" -o "$work/x.jsonl"
    expect_output "the judge '$work/nowhere' is not a directory" ;;
  judge_remote)
    # One judge for many workers: `flywheel reward-serve` serves the judge config's functions, and
    # llm_judge with params.address scores through it exactly as the judge run in place; a wrong
    # token and a server that is down are errors at start naming the address.
    make_judge
    printf 'rewards:\n  functions:\n    - {name: exact_match, weight: 0}\n    - name: llm_judge\n      params: {path: %s, template: "{prompt}{completion}?"}\n' \
      "$work/judge" > "$work/local.yaml"
    expect_exit 0 "$flywheel" reward "$work/local.yaml" -i "$work/in.jsonl" -o "$work/local.jsonl"
    echo "s3cret" > "$work/token"
    "$flywheel" reward-serve "$work/local.yaml" --token-file "$work/token" > "$work/serve.txt" 2>&1 &
    server=$!
    trap 'kill $server 2> /dev/null; rm -rf "$work"' EXIT
    for _ in $(seq 100); do grep -q "serving" "$work/serve.txt" && break; sleep 0.1; done
    port=$(sed -n 's/.*serving exact_match, llm_judge on 127.0.0.1:\([0-9]*\) (token).*/\1/p' "$work/serve.txt")
    [[ -n $port ]] || fail "reward-serve did not start: $(cat "$work/serve.txt")"
    remote_config() {  # $1: the token file
      printf 'rewards:\n  functions:\n    - {name: exact_match, weight: 0}\n    - {name: llm_judge, params: {address: "127.0.0.1:%s", function: llm_judge, token_file: %s}}\n' \
        "$port" "$1" > "$work/remote.yaml"
    }
    remote_config "$work/token"
    expect_exit 0 "$flywheel" reward "$work/remote.yaml" -i "$work/in.jsonl" -o "$work/remote.jsonl"
    expect_output "llm_judge/agreement/exact_match: mean"
    node -e '
      const read = f => require("fs").readFileSync(f, "utf8").trim().split("\n").map(JSON.parse);
      const [a, b] = [read(process.argv[1]), read(process.argv[2])];
      for (let i = 0; i < a.length; ++i) {
        if (Math.abs(a[i].rewards.llm_judge - b[i].rewards.llm_judge) > 1e-12 ||
            a[i].rewards["llm_judge/agreement/exact_match"] !== b[i].rewards["llm_judge/agreement/exact_match"])
          throw new Error(`${JSON.stringify(a[i])} vs ${JSON.stringify(b[i])}`);
      }' "$work/local.jsonl" "$work/remote.jsonl" || fail "the remote judge differs from the local one"
    echo "wrong" > "$work/wrong"
    remote_config "$work/wrong"
    expect_exit 1 "$flywheel" reward "$work/remote.yaml" -i "$work/in.jsonl" -o "$work/x.jsonl"
    expect_output "at 127.0.0.1:$port refused the token"
    kill $server; wait $server 2> /dev/null
    grep -q "flywheel reward-serve: stopped" "$work/serve.txt" || fail "no clean stop: $(cat "$work/serve.txt")"
    remote_config "$work/token"
    expect_exit 1 "$flywheel" reward "$work/remote.yaml" -i "$work/in.jsonl" -o "$work/x.jsonl"
    expect_output "reward 'llm_judge' at 127.0.0.1:$port is not reachable" ;;
  buffer)
    printf '{"model_type": "llama", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4}' > "$work/c.json"
    expect_exit 0 "$flywheel" init-model --config "$work/c.json" --out "$work/m"
    printf '{"prompt": "1+1="}\n{"prompt": "2+2="}\n' > "$work/p.jsonl"
    printf 'model: {path: %s}\ndata: {train_path: %s}\nalgorithm: {name: dapo}\n' \
      "$work/m" "$work/p.jsonl" > "$work/b.yaml"
    "$flywheel" buffer "$work/b.yaml" --snapshot "$work/state.json" > "$work/out.txt" 2> "$work/err.txt" &
    pid=$!
    for _ in $(seq 100); do grep -q "listening on 127.0.0.1:" "$work/out.txt" && break; sleep 0.1; done
    grep -q "listening on 127.0.0.1:[1-9]" "$work/out.txt" || fail "no address: $(cat "$work/err.txt")"
    kill -TERM "$pid"
    wait "$pid" || fail "buffer exited with $?: $(cat "$work/err.txt")"
    grep -q '"format":"flywheel.controller.v1"' "$work/state.json" || fail "no snapshot"
    "$flywheel" buffer "$work/b.yaml" --snapshot "$work/state.json" > "$work/out2.txt" 2> "$work/err2.txt" &
    pid=$!
    for _ in $(seq 100); do grep -q "listening" "$work/out2.txt" && break; sleep 0.1; done
    kill -TERM "$pid"
    wait "$pid" || fail "restart failed: $(cat "$work/err2.txt")"
    grep -q "restored" "$work/err2.txt" || fail "snapshot not restored: $(cat "$work/err2.txt")"
    printf 'model: {path: %s}\ndata: {train_path: %s}\n' "$work/m" "$work/none.jsonl" > "$work/bad.yaml"
    expect_exit 2 "$flywheel" buffer "$work/bad.yaml"
    expect_output "cannot read prompt file" ;;
  *) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
