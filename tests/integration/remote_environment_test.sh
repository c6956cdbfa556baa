#!/usr/bin/env bash
# The remote environment (issue 28) with the Python example server
# (examples/environments/python/keyword_server.py, Debian's python3-grpcio): episodes run over
# gRPC; a bearer token is required when the server asks for one; a server killed mid-episode
# ends those episodes with finish_reason error (the run goes on and exits 0); a server that is
# down at start is an error naming its address.
# Usage: remote_environment_test.sh FLYWHEEL SOURCE_DIR
set -uo pipefail
flywheel=$1
src=$2
work=$(mktemp -d)
servers=()
cleanup() {
  for p in "${servers[@]}"; do kill -9 "$p" 2> /dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Debian's python3, which has the apt packages (a pyenv or venv python3 first on PATH may not).
py=/usr/bin/python3
[[ -x "$py" ]] || py=python3
"$py" -c "import grpc, google.protobuf" 2> /dev/null ||
  fail "python3-grpcio / python3-protobuf are missing (scripts/bootstrap.sh installs them)"
plugin=$(command -v grpc_python_plugin) || fail "grpc_python_plugin (protobuf-compiler-grpc) is missing"
mkdir -p "$work/py"
protoc -I "$src/proto" --python_out="$work/py" --grpc_out="$work/py" \
  --plugin=protoc-gen-grpc="$plugin" "$src/proto/flywheel/v1/environment.proto" ||
  fail "protoc of environment.proto"

port=""
start_server() {  # extra arguments for the server; sets $port
  PYTHONPATH="$work/py" "$py" "$src/examples/environments/python/keyword_server.py" "$@" \
    > "$work/server.log" 2>&1 &
  servers+=($!)
  for _ in $(seq 300); do  # 30 s: python's grpc import is slow on a loaded 2-core machine
    port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$work/server.log" | grep -o '[0-9]*$')
    [[ -n "$port" ]] && return 0
    sleep 0.1
  done
  fail "the example server did not start: $(cat "$work/server.log")"
}

cat > "$work/config.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2,
 "max_position_embeddings": 160}
JSON
"$flywheel" init-model --config "$work/config.json" --out "$work/m" --char-tokenizer --seed 5 \
  > /dev/null || fail "init-model"
printf '{"prompt": "word: ", "answer": "zq"}\n{"prompt": "again: ", "answer": "zq"}\n' > "$work/p.jsonl"
generate() {  # address, then extra arguments
  local address=$1
  shift
  "$flywheel" generate --model "$work/m" -i "$work/p.jsonl" -o "$work/g.jsonl" \
    --environment remote --env-param "address=$address" --max-turns 3 --turn-max-new-tokens 4 \
    --max-new-tokens 100 --max-seq-len 160 --ignore-eos -n 2 --seed 3 "$@" > "$work/gen.log" 2>&1
}

# 1. Episodes over gRPC: three 4-token turns, the server's replies in between.
start_server
generate "127.0.0.1:$port" || fail "generate with the remote environment: $(cat "$work/gen.log")"
node -e '
  const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
  if (lines.length !== 2) throw new Error("records");
  for (const l of lines) for (const c of l.completions) {
    const model = c.sources.map((s, k) => s === "model" ? c.turns[k] : -1).filter((t) => t >= 0);
    if (model.join() !== "0,0,0,0,1,1,1,1,2,2,2,2") throw new Error("model turns " + model);
    if (!/^.{4}(warmer|colder).{4}(warmer|colder).{4}$/s.test(c.text)) throw new Error("text " + c.text);
    if (c.finish_reason !== "length") throw new Error(c.finish_reason + " " + (c.error || ""));
  }' "$work/g.jsonl" || fail "remote episodes are wrong: $(head -c 800 "$work/g.jsonl")"

# 2. A record the environment refuses (no answer) is an invalid line naming the reason.
printf '{"prompt": "word: "}\n' > "$work/bad.jsonl"
"$flywheel" generate --model "$work/m" -i "$work/bad.jsonl" --environment remote \
  --env-param "address=127.0.0.1:$port" > "$work/bad.log" 2>&1 && fail "a refused reset passed"
grep -q "the record has no 'answer' word" "$work/bad.log" || fail "reset error: $(cat "$work/bad.log")"

# 3. A server that requires a token: refused without it, served with it.
echo "s3cret" > "$work/token"
start_server --token-file "$work/token"
generate "127.0.0.1:$port" && fail "no token passed"
grep -q "remote environment at 127.0.0.1:$port: Describe failed (16): missing or wrong token" \
  "$work/gen.log" || fail "no-token error: $(cat "$work/gen.log")"
generate "127.0.0.1:$port" --env-param "token_file=$work/token" ||
  fail "with the token: $(cat "$work/gen.log")"

# 4. The server dies mid-episode (every step takes 2 s; it is killed once it serves a step):
# those episodes end with an error that names the address, and generate still writes every
# line and exits 0.
start_server --verbose
printf '{"prompt": "word: ", "answer": "zq", "delay_s": 2}\n' > "$work/p.jsonl"
generate "127.0.0.1:$port" &
gen=$!
for _ in $(seq 600); do
  grep -q "^step " "$work/server.log" && break
  sleep 0.1
done
grep -q "^step " "$work/server.log" || fail "no step reached the server: $(cat "$work/gen.log")"
kill -9 "${servers[-1]}"
wait "$gen" || fail "generate failed when the environment died: $(cat "$work/gen.log")"
node -e '
  const l = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8").trim());
  for (const c of l.completions) {
    if (c.finish_reason !== "error" || !c.error.includes(`remote environment at 127.0.0.1:${process.argv[2]}`))
      throw new Error(JSON.stringify(c));
  }' "$work/g.jsonl" "$port" || fail "episodes of a dead server: $(cat "$work/g.jsonl")"

# 5. Down at start: a clear error naming the address.
generate "127.0.0.1:$port" && fail "a dead server passed"
grep -q "remote environment at 127.0.0.1:$port is not reachable" "$work/gen.log" ||
  fail "down-at-start error: $(cat "$work/gen.log")"
echo PASS
