// Llama 2's tokenizer.json and tokenizer_config.json, rebuilt from the vocabulary and merges that
// npm's llama-tokenizer-js carries (Meta's 32 000 tokens: the tokens as base64 of their UTF-8
// joined by newlines, id = position; the merges as base64 of little-endian uint16 id pairs, in
// rank order), laid out as meta-llama/Llama-2-7b-hf's files are.
//   node build_llama2.cjs OUT_DIR
const fs = require('fs');
const path = require('path');

const out = process.argv[2];
const source = fs.readFileSync(require.resolve('llama-tokenizer-js/llama-tokenizer.js'), 'utf8');
const constant = (name) => {
  const found = source.match(new RegExp(`const ${name} = "([^"]+)"`));
  if (!found) throw new Error(`llama-tokenizer-js: no ${name}`);
  return Buffer.from(found[1], 'base64');
};
const tokens = constant('llama_vocab_base64').toString('utf8').split('\n');
const pairs = constant('llama_merges_binary');
if (tokens.length !== 32000) throw new Error(`llama-tokenizer-js: ${tokens.length} tokens, expected 32000`);
const merges = [];
for (let i = 0; i + 3 < pairs.length; i += 4) merges.push(`${tokens[pairs.readUInt16LE(i)]} ${tokens[pairs.readUInt16LE(i + 2)]}`);
const vocab = Object.fromEntries(tokens.map((t, id) => [t, id]));
const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
                                    special: true });
const tokenizer = {
  version: '1.0', truncation: null, padding: null,
  added_tokens: [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')],
  normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' },
                                                { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
  pre_tokenizer: null,
  post_processor: {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
           { SpecialToken: { id: '<s>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
  },
  decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' },
                                          { type: 'ByteFallback' }, { type: 'Fuse' },
                                          { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
  model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
           fuse_unk: true, byte_fallback: true, vocab, merges },
};
const config = { add_bos_token: true, add_eos_token: false, bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>',
                 pad_token: null, clean_up_tokenization_spaces: false, legacy: false, model_max_length: 1e30,
                 tokenizer_class: 'LlamaTokenizer' };
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, 'tokenizer.json'), JSON.stringify(tokenizer, null, 2));
fs.writeFileSync(path.join(out, 'tokenizer_config.json'), JSON.stringify(config, null, 2));
