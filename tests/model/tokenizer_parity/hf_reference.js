// Reference token ids from Hugging Face's own implementation (the `tokenizers` npm package, the
// official Node binding of the Rust library).
// Usage: node hf_reference.js NPM_DIR TOKENIZER_JSON CORPUS_JSONL OUT_JSONL ADD_SPECIAL(0|1)
// Writes {"text", "ids", "decoded"} per corpus line, decoded = decode(ids, skip_special=false).
const path = require('path');
const fs = require('fs');
const [npmDir, tokenizerJson, corpusPath, outPath, addSpecial] = process.argv.slice(2);
const { Tokenizer } = require(path.join(npmDir, 'node_modules', 'tokenizers'));

(async () => {
  const tokenizer = Tokenizer.fromFile(tokenizerJson);
  const lines = fs.readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l.length > 0);
  const out = [];
  for (const line of lines) {
    const { text } = JSON.parse(line);
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: addSpecial === '1' });
    const ids = Array.from(encoding.getIds());
    const decoded = await tokenizer.decode(ids, false);
    out.push(JSON.stringify({ text, ids, decoded }));
  }
  fs.writeFileSync(outPath, out.join('\n') + '\n');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
