// Supervised fine-tuning rows of an alpaca-layout file, made independently of zerocpp for its
// masked-loss test: Stanford Alpaca's train.py recipe (prompt + output + EOS tokenized as one text
// with the tokenizer's special tokens, the prompt tokenized alone to find how many labels to mask,
// rows cut at model_max_length), with Hugging Face's tokenizers library (its Rust code through
// the npm binding) on the model's own tokenizer.json.
//   node sft_rows.cjs TOKENIZER_DIR DATA.json MAX_LEN OUT.json
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '../tokenizers/node_modules/tokenizers'));

const [dir, dataPath, maxLen, out] = process.argv.slice(2);
const PROMPT_INPUT =
  'Below is an instruction that describes a task, paired with an input that provides further context. ' +
  'Write a response that appropriately completes the request.\n\n' +
  '### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:';
const PROMPT_NO_INPUT =
  'Below is an instruction that describes a task. ' +
  'Write a response that appropriately completes the request.\n\n' +
  '### Instruction:\n{instruction}\n\n### Response:';

(async () => {
  const tokenizer = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const eos = typeof config.eos_token === 'string' ? config.eos_token : config.eos_token.content;
  const rows = [];
  for (const r of JSON.parse(fs.readFileSync(dataPath, 'utf8'))) {
    const template = r.input ? PROMPT_INPUT : PROMPT_NO_INPUT;
    const prompt = template.replace('{instruction}', () => r.instruction).replace('{input}', () => r.input);
    const ids = (await tokenizer.encode(prompt + r.output + eos, null, { addSpecialTokens: true })).getIds();
    const promptLength = (await tokenizer.encode(prompt, null, { addSpecialTokens: true })).getIds().length;
    const labels = ids.map((id, i) => (i < promptLength ? -100 : id));
    const n = Math.min(ids.length, Number(maxLen));
    rows.push({ ids: ids.slice(0, n), labels: labels.slice(0, n) });
  }
  fs.writeFileSync(out, JSON.stringify({ rows }));
})().catch((e) => { console.error(e); process.exit(1); });
