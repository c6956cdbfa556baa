# The copy task of the SFT tests, sourced by them: copy the second of two letters ("ab:" -> "b").
# copy_task_data DIR: the 676 letter pairs, 100 held out (DIR/eval.jsonl) and 576 to train on
# (DIR/train.jsonl).
copy_task_data() {
  awk -v dir="$1" 'BEGIN { for (i = 0; i < 26; i++) for (j = 0; j < 26; j++) {
    a = sprintf("%c", 97 + i); b = sprintf("%c", 97 + j)
    line = sprintf("{\"prompt\": \"%s%s:\", \"response\": \"%s\", \"answer\": \"%s\"}", a, b, b, b)
    if ((i * 26 + j) * 7919 % 676 < 100) print line > (dir "/eval.jsonl"); else print line > (dir "/train.jsonl") } }'
}
# copy_task_score_input EVAL OUT: each record of EVAL as `flywheel score` input in the character
# tokenizer's ids, {"ids": prompt + response + eos, "n": the response's tokens + 1}.
copy_task_score_input() {
  node -e '
    const fs = require("fs");
    const chars = "\n" + Array.from({length: 95}, (_, i) => String.fromCharCode(32 + i)).join("");
    const id = c => 4 + chars.indexOf(c);
    const out = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(l => {
      const r = JSON.parse(l);
      return JSON.stringify({ids: [...r.prompt + r.response].map(id).concat([2]), n: r.response.length + 1});
    });
    fs.writeFileSync(process.argv[2], out.join("\n") + "\n");' "$1" "$2"
}
# copy_task_model FLYWHEEL FAMILY DIR: a random 2-layer model of FAMILY (qwen2, llama, ...) with
# the character tokenizer in DIR (config in DIR.json).
copy_task_model() {
  cat > "$3.json" << JSON
{"model_type": "$2", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "eos_token_id": 2,
 "max_position_embeddings": 64}
JSON
  "$1" init-model --config "$3.json" --out "$3" --char-tokenizer --seed 1 > /dev/null
}
