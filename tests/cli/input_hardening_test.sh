#!/usr/bin/env bash
# Bad model directories, tokenizers, configs and JSONL inputs (issue 10, items 17-22): each is an
# error naming the file, field or line, never an abort or a hang.
# Usage: input_hardening_test.sh FLYWHEEL SOURCE_DIR CASE
set -uo pipefail
flywheel=$1
src=$2
case_name=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { local message="$*"; echo "FAIL ($case_name): ${message:0:3000}" >&2; exit 1; }
# expect_exit CODE CMD...: runs CMD, keeps stdout+stderr in $out, checks the exit code. Every
# command runs under `timeout` so that a regression to a blocking read fails instead of hanging
# (the fixed code refuses special files before reading them, so nothing here waits).
expect_exit() {
  local want=$1; shift
  out=$(timeout "${FLYWHEEL_TEST_TIMEOUT:-120}" "$@" 2>&1); local got=$?
  [[ $got -ne 124 ]] || fail "timed out (blocked?): $*"
  [[ $got -eq $want ]] || fail "exit $got (wanted $want) from: $*"$'\n'"$out"
}
expect_output() { grep -qF -- "$1" <<<"$out" || fail "output lacks '$1':"$'\n'"$out"; }

# tiny_model DIR VOCAB [init-model flags...]: a 2-layer llama-shaped model.
tiny_model() {
  local dir=$1 vocab=$2; shift 2
  printf '{"model_type": "llama", "vocab_size": %d, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "eos_token_id": 2}' "$vocab" > "$work/tiny_config.json"
  "$flywheel" init-model --config "$work/tiny_config.json" --out "$dir" "$@" >/dev/null ||
    fail "init-model failed"
}

case "$case_name" in
  score_vocab_mismatch)
    # Item 17: the tokenizer (100 ids) gives ids beyond the model's vocabulary (50).
    tiny_model "$work/big" 128 --char-tokenizer
    tiny_model "$work/m" 50
    cp "$work/big/char_tokenizer.json" "$work/m/"
    printf '{"text": "  "}\n{"text": "hi"}\n' > "$work/in.jsonl"  # ' ' is id 5, 'h' id 77
    expect_exit 2 "$flywheel" score --model "$work/m" -i "$work/in.jsonl" -o "$work/out.jsonl"
    expect_output "in.jsonl:2: the tokenizer gave id 77, outside the model's vocabulary [0, 50)"
    # The same directory is not exported as if it worked.
    expect_exit 2 "$flywheel" export "$work/m" "$work/e"
    expect_output "char_tokenizer.json has ids up to 99, but the model's vocab_size is 50"
    # ids lines were already checked; text lines that fit still score.
    printf '{"text": "  "}\n{"ids": [1, 49]}\n' > "$work/ok.jsonl"
    expect_exit 0 "$flywheel" score --model "$work/m" -i "$work/ok.jsonl" -o "$work/out.jsonl"
    expect_output "2 sequence(s)" ;;
  absurd_sizes)
    # Item 18: sizes that overflow or cannot be allocated are errors naming the field.
    for spec in hidden_size=4611686018427387904 intermediate_size=1099511627776 \
                num_hidden_layers=2147483648 vocab_size=50000000; do
      key=${spec%%=*} value=${spec#*=}
      declare -A sizes=([vocab_size]=64 [hidden_size]=32 [intermediate_size]=64
                        [num_hidden_layers]=1)
      sizes[$key]=$value
      printf '{"model_type": "llama", "vocab_size": %s, "hidden_size": %s,
        "intermediate_size": %s, "num_hidden_layers": %s, "num_attention_heads": 4}' \
        "${sizes[vocab_size]}" "${sizes[hidden_size]}" "${sizes[intermediate_size]}" \
        "${sizes[num_hidden_layers]}" > "$work/c.json"
      expect_exit 2 "$flywheel" init-model --config "$work/c.json" --out "$work/x"
      expect_output "$work/c.json: $key $value exceeds the limit of"
      mkdir -p "$work/d" && cp "$work/c.json" "$work/d/config.json"
      printf '{"ids": [1, 2]}\n' > "$work/in.jsonl"
      expect_exit 2 "$flywheel" score --model "$work/d" -i "$work/in.jsonl"
      expect_output "$key $value exceeds the limit of"
    done
    # Every size within its limit, the parameters far beyond this machine's memory.
    printf '{"model_type": "llama", "vocab_size": 16000000, "hidden_size": 65536,
      "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}' > "$work/c.json"
    expect_exit 2 "$flywheel" init-model --config "$work/c.json" --out "$work/x"
    expect_output "the model needs"
    expect_output "vocab_size 16000000, hidden_size 65536"
    # A tokenizer.json with one id of 2^31-1.
    mkdir -p "$work/t"
    cat > "$work/t/tokenizer.json" <<'JSON'
{"model": {"type": "BPE", "vocab": {"a": 0, "b": 2147483647}, "merges": []},
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
 "decoder": {"type": "ByteLevel"}}
JSON
    printf '{"text": "ab"}\n' > "$work/t.jsonl"
    expect_exit 2 "$flywheel" tokenize --tokenizer "$work/t" -i "$work/t.jsonl"
    expect_output "tokenizer.json: vocab entry 'b' has id 2147483647; token ids must be below" ;;
  special_files)
    # Item 19: FIFOs, devices and directories are refused before anything is read.
    tiny_model "$work/m" 128 --char-tokenizer
    printf '{"text": "1+1"}\n' > "$work/in.jsonl"
    for name in config.json model.safetensors; do
      rm -rf "$work/d" && cp -r "$work/m" "$work/d" && rm "$work/d/$name"
      mkfifo "$work/d/$name"
      expect_exit 2 "$flywheel" score --model "$work/d" -i "$work/in.jsonl"
      expect_output "$work/d/$name"
      expect_output "not a regular file"
    done
    for device in /dev/zero /dev/urandom; do
      rm -rf "$work/d" && cp -r "$work/m" "$work/d" && ln -sf "$device" "$work/d/config.json"
      expect_exit 2 "$flywheel" score --model "$work/d" -i "$work/in.jsonl"
      expect_output "config.json': it is a character device, not a regular file"
    done
    mkdir -p "$work/t" && mkfifo "$work/t/tokenizer.json"
    expect_exit 2 "$flywheel" tokenize --tokenizer "$work/t" -i "$work/in.jsonl"
    expect_output "tokenizer.json': it is a FIFO (named pipe), not a regular file"
    # export copies side files: a FIFO among them is refused, not opened.
    rm -rf "$work/d" && cp -r "$work/m" "$work/d" && mkfifo "$work/d/generation_config.json"
    expect_exit 2 "$flywheel" export "$work/d" "$work/e"
    expect_output "generation_config.json"
    expect_output "not a regular file"
    # generation_config.json is optional for generate: a FIFO there must not block it.
    printf '{"prompt_ids": [5, 6]}\n' > "$work/p.jsonl"
    out=$(timeout "${FLYWHEEL_TEST_TIMEOUT:-120}" "$flywheel" generate --model "$work/d" -i "$work/p.jsonl" \
      --max-new-tokens 2 2>&1)
    [[ $? -ne 124 ]] || fail "generate blocked on a FIFO generation_config.json"
    # A directory or a device as the JSONL input is an error, not "0 sequences".
    for input in "$work" /dev/zero; do
      expect_exit 2 "$flywheel" score --model "$work/m" -i "$input"
      expect_output "cannot read '$input': it is a"
      expect_exit 2 "$flywheel" tokenize --tokenizer "$work/m" -i "$input"
      expect_output "cannot read '$input': it is a"
    done
    # Piped input still works.
    expect_exit 0 "$flywheel" tokenize --tokenizer "$work/m" -i <(cat "$work/in.jsonl")
    expect_output '"ids":[' ;;
  fuzz_findings)
    # Issue 26: a tokenizer.json of 20 million integers (40 MB) is refused before its parse tree
    # outgrows a 4 GB address space; a config.json declaring 20000 layers over a 1-layer
    # checkpoint is refused before the model is allocated.
    mkdir -p "$work/t"
    node -e 'const fs = require("fs"); const n = 20000000;
      fs.writeFileSync(process.argv[1], "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, " +
        "\"merges\": [" + "1,".repeat(n - 1) + "1]}}");' "$work/t/tokenizer.json"
    printf '{"text": "ab"}\n' > "$work/t.jsonl"
    expect_exit 2 bash -c "ulimit -v 4000000; exec \"\$@\"" _ "$flywheel" tokenize \
      --tokenizer "$work/t" -i "$work/t.jsonl"
    expect_output "tokenizer.json: line 1, column"
    expect_output "more than 8388608 values"
    printf '{"model_type": "llama", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 4}' > "$work/c.json"
    "$flywheel" init-model --config "$work/c.json" --out "$work/m" --char-tokenizer > /dev/null ||
      fail "init-model"
    node -e 'const fs = require("fs"); const f = process.argv[1];
      const c = JSON.parse(fs.readFileSync(f)); c.num_hidden_layers = 20000;
      fs.writeFileSync(f, JSON.stringify(c));' "$work/m/config.json"
    printf '{"ids": [1, 2, 3]}\n' > "$work/in.jsonl"
    expect_exit 2 bash -c "ulimit -v 4000000; exec \"\$@\"" _ "$flywheel" score \
      --model "$work/m" -i "$work/in.jsonl"
    expect_output "config.json: num_hidden_layers 20000 but the weights hold 1 layer(s)"
    # /dev/null is a device: refused, like /dev/zero (an empty input is an empty file).
    expect_exit 2 "$flywheel" tokenize --tokenizer "$work/m" -i /dev/null
    expect_output "it is a character device, not a file or a pipe" ;;
  jsonl_long_line)
    # Item 20: a line longer than the limit is an error naming path:line, never parsed whole.
    tiny_model "$work/m" 128 --char-tokenizer
    { printf '{"ids": [5, 6]}\n{"ids": ['
      head -c 17000000 /dev/zero | tr '\0' '7'
      printf ']}\n{"ids": [5, 6]}\n'; } > "$work/in.jsonl"
    expect_exit 2 "$flywheel" score --model "$work/m" -i "$work/in.jsonl"
    expect_output "in.jsonl:2: line is longer than 16777216 bytes"
    expect_exit 2 "$flywheel" tokenize --tokenizer "$work/m" --decode -i "$work/in.jsonl"
    expect_output "in.jsonl:2: line is longer than 16777216 bytes" ;;
  tokenizer_regex_budget)
    # Item 21: a pre-tokenizer regex with a quadratic lookahead stops on its work budget.
    mkdir -p "$work/t"
    cat > "$work/t/tokenizer.json" <<'JSON'
{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
   {"type": "Split", "pattern": {"Regex": "a(?=a*b)|a"}, "behavior": "Isolated"},
   {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
 "decoder": {"type": "ByteLevel"}}
JSON
    { printf '{"text": "'; head -c 65536 /dev/zero | tr '\0' 'a'; printf '"}\n'; } > "$work/in.jsonl"
    expect_exit 2 "$flywheel" tokenize --tokenizer "$work/t" -i "$work/in.jsonl"
    expect_output "in.jsonl:1: pre-tokenizer regex 'a(?=a*b)|a' exceeded its work budget" ;;
  rope_scaling)
    # Item 22: llama3 rope_scaling values that make the frequencies NaN.
    base='"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 4'
    for spec in factor=0 low_freq_factor=-1 high_freq_factor=0.5 \
                original_max_position_embeddings=0; do
      key=${spec%%=*} value=${spec#*=}
      declare -A rope=([factor]=8 [low_freq_factor]=1 [high_freq_factor]=4
                       [original_max_position_embeddings]=8192)
      rope[$key]=$value
      printf '{%s, "rope_scaling": {"rope_type": "llama3", "factor": %s, "low_freq_factor": %s,
        "high_freq_factor": %s, "original_max_position_embeddings": %s}}' "$base" \
        "${rope[factor]}" "${rope[low_freq_factor]}" "${rope[high_freq_factor]}" \
        "${rope[original_max_position_embeddings]}" > "$work/c.json"
      expect_exit 2 "$flywheel" init-model --config "$work/c.json" --out "$work/x"
      expect_output "$work/c.json: rope_scaling.$key"
    done ;;
  *) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
