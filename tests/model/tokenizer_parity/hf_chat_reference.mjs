// Renders each conversation with the model's own Jinja chat template (tokenizer_config.json)
// using @huggingface/jinja, the template engine of transformers.js.
// Usage: node hf_chat_reference.mjs NPM_DIR TOKENIZER_CONFIG CONVERSATIONS_JSONL OUT_JSONL
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';
const [npmDir, configPath, conversationsPath, outPath] = process.argv.slice(2);
const require = createRequire(path.join(npmDir, 'package.json'));
const { Template } = require('@huggingface/jinja');
const config = JSON.parse(fs.readFileSync(configPath, 'utf8'));
const template = new Template(config.chat_template);
const out = [];
for (const line of fs.readFileSync(conversationsPath, 'utf8').split('\n')) {
  if (!line) continue;
  const { messages } = JSON.parse(line);
  const prompt = template.render({ messages, add_generation_prompt: true, bos_token: config.bos_token ?? '' });
  out.push(JSON.stringify({ prompt }));
}
fs.writeFileSync(outPath, out.join('\n') + '\n');
