// What Hugging Face's tokenizers make of the test texts, for zerocpp's tokenizer tests.
//   node reference.cjs OUT
// OUT holds one directory per tokenizer (tokenizer.json, tokenizer_config.json) and texts/*.txt
// (raw bytes, read as UTF-8 with U+FFFD for ill-formed bytes, as Node and Rust read them). For
// each tokenizer it writes OUT/<name>/expected.json: per text, the ids without and with the
// special tokens and the decoded text with and without them, from the tokenizers library itself
// (its Rust code through the npm binding, `tokenizers`); and whether HF's JavaScript port
// (`@huggingface/tokenizers`) gives the same ids, as a second opinion. It writes the texts first:
// a hand-picked list of hard cases and seeded random mixtures of them.
const fs = require('fs');
const path = require('path');
const rust = require('tokenizers');
const js = require('@huggingface/tokenizers');

const out = process.argv[2];
if (!out) throw new Error('usage: node reference.cjs OUT');

const hard = [
  'Hello world', '', ' ', '   leading spaces', 'trailing spaces   ', '\n\n\n', '\t\ttabs\tand\r\nCRLF\r\n',
  'numbers 1 12 123 1234 12345 1234567 3.14159 1,000,000 ٣٤٥ ² ½ Ⅻ', "I'm you're he'll she'd it's we've they'RE DON'T",
  'café naïve résumé Ångström', 'cafe\u0301 nai\u0308ve A\u030angstro\u0308m', '日本語のテキストです。中文文本，한국어 텍스트',
  '👨‍👩‍👧‍👦 family 👍🏽 🇫🇷 ❤️ 🏳️‍🌈', '<|begin_of_text|>Hello<|eot_id|>', '<s>Hi</s> <unk>',
  '<|im_start|>user\nhi<|im_end|>\n<|endoftext|>', 'a\u00a0b\u3000c\u2003d\u200be\u2028f\u0085g',
  'def f(x):\n    return x**2  # comment\n\n\tpass\n', '    indented\n        more\n', 'x  y   z    w',
  'ÀÉÎÕÜ àéîõü ß ẞ ﬁ ﬀ ﬃ Ǆ ǅ ǆ', 'Ωμέγα Привет мир שלום مرحبا नमस्ते', "'s 's 'S 'll'LL 're'Re", '!!!???...,,,;;;',
  '\u0000\u0001\u001f\u007f', 'https://example.com/path?q=1&r=2#frag', '<|begin_of_text|><|begin_of_text|>',
];
const pieces = [
  'the', ' quick', ' brown', 'Fox', ' ', '  ', '\n', '\t', '\r\n', '0', '42', '2024', '3.5', "'s", "'t", "'re", "'M", 'é',
  'e\u0301', 'ñ', '日本', '语', '한', '🙂', '👨‍💻', '🇯🇵', '\u00a0', '\u3000', '—', '…', '«', '»', '"', '(', ')', '{', '}',
  '#', '$', '%', '_', '-', '=', '<', '>', '<s>', '</s>', '<|eot_id|>', '<|im_end|>', '<|endoftext|>', 'ß', 'İ', 'ǅ', 'Ⅳ',
  '١٢', 'ab', 'XYZ', 'camelCase', 'snake_case', '  \n  ', '\u200d', '\ufeff', '𝔘𝔫𝔦', '🏿',
];
let seed = 12345;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const texts = hard.map((t) => Buffer.from(t, 'utf8'));
for (let i = 0; i < 400; i++) {
  let s = '';
  const n = 1 + Math.floor(random() * 40);
  for (let k = 0; k < n; k++) s += pieces[Math.floor(random() * pieces.length)];
  texts.push(Buffer.from(s, 'utf8'));
}
// Ill-formed UTF-8: a lone continuation byte, a truncated sequence, an overlong form, a surrogate.
texts.push(Buffer.from([0x61, 0x62, 0xff, 0xfe, 0x20, 0x64, 0xe2, 0x82, 0x20, 0x67, 0xc0, 0xaf, 0xed, 0xa0, 0x80, 0xc3]));
texts.push(fs.readFileSync(path.join(__dirname, '..', '..', '..', 'README.md')));  // a long real text

fs.mkdirSync(path.join(out, 'texts'), { recursive: true });
const names = texts.map((_, i) => `${String(i).padStart(3, '0')}.txt`);
texts.forEach((t, i) => fs.writeFileSync(path.join(out, 'texts', names[i]), t));

(async () => {
  for (const model of fs.readdirSync(out).filter((d) => d !== 'texts').sort()) {
    const dir = path.join(out, model);
    const tokenizer = rust.Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
    const port = new js.Tokenizer(JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')),
                                  JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8')));
    const cases = [];
    let agree = 0;
    for (let i = 0; i < texts.length; i++) {
      const text = texts[i].toString('utf8');
      const ids = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
      const special = (await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds();
      const portIds = port.encode(text, { add_special_tokens: false }).ids;
      if (JSON.stringify(portIds) === JSON.stringify(ids)) agree++;
      cases.push({ text: names[i], ids, ids_special: special, decoded: await tokenizer.decode(special, false),
                   decoded_skip_special: await tokenizer.decode(special, true) });
    }
    fs.writeFileSync(path.join(dir, 'expected.json'), JSON.stringify({ js_port_agrees: agree, cases }));
    console.log(`${model}: ${cases.length} texts; HF's JavaScript port gives the same ids for ${agree}`);
  }
})().catch((e) => { console.error(e); process.exit(1); });
