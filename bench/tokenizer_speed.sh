#!/usr/bin/env bash
# Encoding speed: zero-tokenize against Hugging Face's tokenizers (the Rust library through npm's
# binding, and its JavaScript port) on the same file, one thread each, in one invocation. The
# text is the README repeated to about 4 MB with a CJK/emoji paragraph mixed in; the tokenizers
# are the test fixture's real files (tests/reference/tokenizers/make_cases.sh).
#   bench/tokenizer_speed.sh [CASES_DIR]    (default build/tests/tokenizer_cases)
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${1:-build/tests/tokenizer_cases}
[[ -f $cases/llama3_1/tokenizer.json ]] || tests/reference/tokenizers/make_cases.sh "$cases" > /dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for _ in $(seq 1 160); do
  cat README.md
  printf '日本語のテキストです。中文文本，한국어 텍스트 👨‍👩‍👧‍👦 café naïve 1234567\n'
done > "$tmp/text.txt"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(wc -c < "$tmp/text.txt") bytes"
echo
echo "| tokenizer | tokens | zero-tokenize MB/s | tokenizers (Rust, npm binding) MB/s | @huggingface/tokenizers (JS) MB/s | zerocpp ÷ Rust |"
echo "|---|---:|---:|---:|---:|---:|"
for model in llama3_1 qwen2_5 mistral gpt2; do
  best=0
  for _ in 1 2 3; do
    mbs=$(OMP_NUM_THREADS=1 build/apps/zero-tokenize --time --tokenizer "$cases/$model" "$tmp/text.txt" 2>&1 > "$tmp/ids" |
          sed -E 's/.*\(([0-9.]+) MB\/s\).*/\1/')
    best=$(awk -v a="$best" -v b="$mbs" 'BEGIN { print (b > a ? b : a) }')
  done
  tokens=$(wc -w < "$tmp/ids")
  read -r rust_tokens rust js < <(RAYON_NUM_THREADS=1 node tests/reference/tokenizers/time_encode.cjs "$cases/$model" "$tmp/text.txt" |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["rust"]["tokens"], r["rust"]["mb_per_s"], r["js_port"]["mb_per_s"])')
  [[ $rust_tokens -eq $tokens ]] || echo "note: $model: zero-tokenize gave $tokens tokens, the Rust library $rust_tokens"
  printf '| %s | %d | %.2f | %.2f | %.2f | %.2f |\n' "$model" "$tokens" "$best" "$rust" "$js" "$(awk -v a="$best" -v b="$rust" 'BEGIN { print a / b }')"
done
