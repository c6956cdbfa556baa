#!/usr/bin/env bash
# Installs flywheel into a temporary prefix, builds examples/plugin out of tree against it with
# find_package(flywheel), then loads the plugin: through the installed `flywheel` binary
# (validate-config resolves the `csv` sink it registers) and through example_plugin_driver
# (which writes metrics through the plugin's sink and checks the CSV).
# Usage: example_plugin_test.sh SOURCE_DIR BUILD_DIR DRIVER
set -euo pipefail
src=$1
build=$2
driver=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
cmake -S "$src/examples/plugin" -B "$work/plugin" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > "$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/plugin" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
plugin="$work/plugin/libflywheel_example_plugin.so"
[[ -f "$plugin" ]] || { echo "FAIL: $plugin was not built"; exit 1; }

cat > "$work/config.yaml" <<YAML
plugins: [$plugin]
logging:
  run_dir: $work/run
  sinks: [console, csv]
algorithm:
  name: grpo
  policy_loss: cispo
  advantage_estimator: median_baseline
YAML
"$work/prefix/bin/flywheel" validate-config --quiet "$work/config.yaml"

# Without the plugin, the same config names an unknown sink.
printf 'logging:\n  sinks: [csv]\n' > "$work/no_plugin.yaml"
if "$work/prefix/bin/flywheel" validate-config "$work/no_plugin.yaml" 2> "$work/err.txt"; then
  echo "FAIL: csv sink resolved without its plugin"; exit 1
fi
grep -qF "unknown metrics_sink 'csv'" "$work/err.txt"

# The plugin's reward, through `flywheel reward`: 1 for completions of at most 5 characters.
cat > "$work/reward.yaml" <<YAML
plugins: [$plugin]
rewards:
  functions:
    - name: short_answer
      params: {max_chars: 5}
YAML
printf '%s\n' '{"completion": "12345"}' '{"completion": "123456"}' > "$work/c.jsonl"
"$work/prefix/bin/flywheel" reward "$work/reward.yaml" -i "$work/c.jsonl" -o "$work/s.jsonl" 2> "$work/reward.log" ||
  { cat "$work/reward.log"; exit 1; }
grep -qF '"reward":1,' <(sed -n 1p "$work/s.jsonl") || { echo "FAIL: $(cat "$work/s.jsonl")"; exit 1; }
grep -qF '"reward":0,' <(sed -n 2p "$work/s.jsonl") || { echo "FAIL: $(cat "$work/s.jsonl")"; exit 1; }
printf 'plugins: [%s]\nrewards:\n  functions: [{name: short_answer, params: {max_char: 5}}]\n' \
  "$plugin" > "$work/typo.yaml"
if "$work/prefix/bin/flywheel" reward "$work/typo.yaml" -i "$work/c.jsonl" -o "$work/s.jsonl" 2> "$work/err.txt"; then
  echo "FAIL: unknown reward option accepted"; exit 1
fi
grep -qF "did you mean 'max_chars'?" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }

# The plugin's environment, through `flywheel eval`: every held-out episode lasts its 3 turns.
printf '{"model_type": "qwen2", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2, "max_position_embeddings": 64}' > "$work/m.json"
"$work/prefix/bin/flywheel" init-model --config "$work/m.json" --out "$work/m" --char-tokenizer > /dev/null
cat > "$work/env.yaml" <<YAML
plugins: [$plugin]
model: {path: $work/m, max_seq_len: 64}
tokenizer: {type: char, chat_template: none}
rollout: {max_new_tokens: 40}
environment: {name: countdown, max_turns: 5, turn_max_new_tokens: 3, params: {turns: "3"}}
YAML
printf '%s\n' '{"prompt": "go: ", "answer": "done"}' '{"prompt": "again: ", "answer": "done"}' > "$work/e.jsonl"
"$work/prefix/bin/flywheel" eval "$work/m" --config "$work/env.yaml" --data "$work/e.jsonl" \
  --set eval.judge=answer > "$work/eval.txt" 2>&1 || { cat "$work/eval.txt"; exit 1; }
grep -qF '"turns/mean":3' "$work/eval.txt" || { echo "FAIL: $(cat "$work/eval.txt")"; exit 1; }

FLYWHEEL_EXAMPLE_PLUGIN="$plugin" FLYWHEEL_EXAMPLE_CONFIG="$work/config.yaml" "$driver"
echo "PASS: example plugin built out of tree and loaded"
