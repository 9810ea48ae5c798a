#!/usr/bin/env bash
# monitor_writer_demo writes events through MonitorMaster; read_tfevents.py reads them back with
# Python's protobuf runtime, its own CRC-32C and Python's csv module, and compares with what the
# demo says it wrote. Then a copy of the event file with one flipped byte must be rejected, so a
# reader that checked nothing would fail this test.
#   reader_test.sh MONITOR_WRITER_DEMO PYTHON3 PROTOC
set -euo pipefail
demo=$1 python=$2 protoc=$3
reader="$(dirname "$0")/read_tfevents.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$demo" "$work/out" "$work/expected.tsv"
files=("$work"/out/demo/events.out.tfevents.*)
[[ ${#files[@]} -eq 1 && -f ${files[0]} ]] || { echo "want one event file, got: ${files[*]}" >&2; exit 1; }
event_file=${files[0]}

"$python" "$reader" --protoc "$protoc" --expect "$work/expected.tsv" --csv-dir "$work/out/demo" "$event_file"

# Flip one byte inside the last record's data (the byte just before its 4-byte CRC).
cp "$event_file" "$work/corrupt"
"$python" -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[-5] ^= 0xFF; open(sys.argv[1], "wb").write(b)' \
  "$work/corrupt"
if "$python" "$reader" --protoc "$protoc" "$work/corrupt" >/dev/null 2>"$work/corrupt.err"; then
  echo "the reader accepted a corrupted event file" >&2
  exit 1
fi
grep -q "bad data CRC" "$work/corrupt.err" || { echo "unexpected reader error:" >&2; cat "$work/corrupt.err" >&2; exit 1; }
echo "corrupted copy rejected: $(cat "$work/corrupt.err")"
