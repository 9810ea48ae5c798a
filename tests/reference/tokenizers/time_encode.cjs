// Encoding speed of Hugging Face's tokenizers on one file, for bench/tokenizer_speed.sh:
//   node time_encode.cjs TOKENIZER_DIR FILE   → one JSON line: tokens and MB/s of the Rust library
// (npm's binding, one call) and of the JavaScript port, each the best of 3 runs.
const fs = require('fs');
const path = require('path');
const rust = require('tokenizers');
const js = require('@huggingface/tokenizers');
const [dir, file] = process.argv.slice(2);
const text = fs.readFileSync(file).toString('utf8');
const bytes = fs.statSync(file).size;
const best = async (encode) => {
  let seconds = Infinity, tokens = 0;
  for (let i = 0; i < 3; i++) {
    const start = process.hrtime.bigint();
    tokens = (await encode()).length;
    seconds = Math.min(seconds, Number(process.hrtime.bigint() - start) / 1e9);
  }
  return { tokens, mb_per_s: bytes / seconds / 1e6 };
};
(async () => {
  const r = rust.Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const p = new js.Tokenizer(JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')),
                             JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8')));
  const rustResult = await best(async () => (await r.encode(text, null, { addSpecialTokens: false })).getIds());
  const jsResult = await best(async () => p.encode(text, { add_special_tokens: false }).ids);
  console.log(JSON.stringify({ bytes, rust: rustResult, js_port: jsResult }));
})();
