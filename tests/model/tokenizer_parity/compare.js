// Compares flywheel's ids and decoded text with the reference, line by line.
// Usage: node compare.js REFERENCE_JSONL ENCODED_JSONL DECODED_JSONL
const fs = require('fs');
const read = (p) => fs.readFileSync(p, 'utf8').split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
const [ref, enc, dec] = process.argv.slice(2).map(read);
if (ref.length !== enc.length || ref.length !== dec.length) {
  console.error(`line counts differ: reference ${ref.length}, encoded ${enc.length}, decoded ${dec.length}`);
  process.exit(1);
}
let idMismatches = 0;
let textMismatches = 0;
for (let i = 0; i < ref.length; i++) {
  const same = ref[i].ids.length === enc[i].ids.length && ref[i].ids.every((v, k) => v === enc[i].ids[k]);
  if (!same) {
    if (idMismatches++ < 5) {
      console.error(`ids differ on line ${i + 1} ${JSON.stringify(ref[i].text)}:\n  hf:       ${JSON.stringify(ref[i].ids)}\n  flywheel: ${JSON.stringify(enc[i].ids)}`);
    }
  }
  if (ref[i].decoded !== dec[i].text) {
    if (textMismatches++ < 5) {
      console.error(`decode differs on line ${i + 1}:\n  hf:       ${JSON.stringify(ref[i].decoded)}\n  flywheel: ${JSON.stringify(dec[i].text)}`);
    }
  }
}
const roundTrips = ref.filter((r) => r.decoded === r.text).length;
console.log(`${ref.length} strings: ${ref.length - idMismatches} identical ids, ${ref.length - textMismatches} identical decodes (HF's decode returns the input itself for ${roundTrips})`);
process.exit(idMismatches + textMismatches === 0 ? 0 : 1);
