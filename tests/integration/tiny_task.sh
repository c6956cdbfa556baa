# Sourced by the end-to-end scripts: the 2-layer Qwen2-shaped model (character tokenizer) and
# the addition task they train on.
# tiny_task FLYWHEEL WORK DIGITS TRAIN: writes WORK/m (the model) and WORK/data/{train,eval}.jsonl
# (TRAIN records of DIGITS-digit sums, 8 held out); fails (non-zero) with a message otherwise.
tiny_task() {
  local flywheel=$1 work=$2 digits=$3 train=$4
  cat > "$work/c.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2,
 "max_position_embeddings": 32}
JSON
  "$flywheel" init-model --config "$work/c.json" --out "$work/m" --char-tokenizer --seed 3 \
    > /dev/null || { echo "init-model failed" >&2; return 1; }
  "$flywheel" make-data addition --digits "$digits" --train "$train" --eval 8 --seed 5 \
    --out "$work/data" > /dev/null || { echo "make-data failed" >&2; return 1; }
}
