#!/usr/bin/env python3
"""An independent reader for zerocpp's monitor output.

Compiles tests/monitor/tfevents_subset.proto with protoc into a temporary directory, reads every
TFRecord of a TensorBoard event file, checks both masked CRC-32C values with its own (bitwise)
CRC, parses each record with Python's protobuf runtime and prints the scalars, one per line:
    tag <TAB> step <TAB> value      (value: the float32 as %.9g)
With --expect FILE (lines "tag<TAB>step<TAB>value", value as %.17g), also checks the scalars
against it, and with --csv-dir DIR checks DeepSpeed's CSV files there with Python's csv module.
Exits non-zero on the first problem.
"""
import argparse, csv, importlib, os, struct, subprocess, sys, tempfile, time


def crc32c(data):
    # Bit by bit, unlike the C++ table version, so that a shared mistake is unlikely.
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def load_proto_module(protoc):
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="tfevents_pb_") as out:
        subprocess.run([protoc, f"--proto_path={here}", f"--python_out={out}", "tfevents_subset.proto"], check=True)
        sys.path.insert(0, out)
        sys.dont_write_bytecode = True
        return importlib.import_module("tfevents_subset_pb2")  # loaded: the directory may go


def records(path):
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise SystemExit(f"{path}: truncated record header at byte {pos}")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if header_crc != masked(crc32c(header)):
            raise SystemExit(f"{path}: bad length CRC at byte {pos}")
        body = data[pos + 12:pos + 12 + length]
        if len(body) != length or len(data) < pos + 16 + length:
            raise SystemExit(f"{path}: truncated record at byte {pos}")
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if body_crc != masked(crc32c(body)):
            raise SystemExit(f"{path}: bad data CRC at byte {pos}")
        yield body
        pos += 16 + length


def read_scalars(path, pb):
    scalars = []
    for index, body in enumerate(records(path)):
        event = pb.Event()
        event.ParseFromString(body)
        # Re-encoding without unknown fields must give the same bytes: no field outside the
        # subset, fields in number order, proto3 defaults left out (protobuf's own encoding).
        event.DiscardUnknownFields()
        if event.SerializeToString(deterministic=True) != body:
            raise SystemExit(f"{path}: record {index} is not the canonical encoding of its fields")
        if abs(event.wall_time - time.time()) > 24 * 3600:
            raise SystemExit(f"{path}: record {index} wall_time {event.wall_time} is not today")
        kind = event.WhichOneof("what")
        if index == 0:
            if kind != "file_version" or event.file_version != "brain.Event:2":
                raise SystemExit(f"{path}: first record is not file_version brain.Event:2")
            continue
        if kind != "summary":
            raise SystemExit(f"{path}: record {index} is {kind}, not a summary")
        for value in event.summary.value:
            if value.WhichOneof("value") != "simple_value":
                raise SystemExit(f"{path}: record {index} tag {value.tag} has no simple_value")
            scalars.append((value.tag, event.step, value.simple_value))
    return scalars


def check_expected(scalars, expect_path):
    expected = []
    for line in open(expect_path):
        tag, step, value = line.rstrip("\n").split("\t")
        expected.append((tag, int(step), float(value)))
    as_float32 = [(t, s, struct.unpack("<f", struct.pack("<f", v))[0]) for t, s, v in expected]
    if scalars != as_float32:
        raise SystemExit(f"scalars differ from {expect_path}:\n read {scalars}\n want {as_float32}")
    return expected


def check_csv(csv_dir, expected):
    by_name = {}
    for tag, step, value in expected:
        by_name.setdefault(tag, []).append((step, value))
    for tag, rows in by_name.items():
        path = os.path.join(csv_dir, tag.replace("/", "_").replace(" ", "_") + ".csv")
        raw = open(path, "rb").read()
        if raw.count(b"\r\n") != len(rows) + 1:
            raise SystemExit(f"{path}: expected {len(rows) + 1} lines ending in CRLF")
        table = list(csv.reader(open(path, newline="")))
        if table[0] != ["step", tag.split("/")[-1]]:
            raise SystemExit(f"{path}: header {table[0]}")
        for (step, value), row in zip(rows, table[1:]):
            # repr(float(text)) == text: the value is printed exactly as DeepSpeed's Python prints it.
            if int(row[0]) != step or float(row[1]) != value or repr(float(row[1])) != row[1]:
                raise SystemExit(f"{path}: row {row}, want [{step}, {value!r}]")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("event_file")
    parser.add_argument("--protoc", default="protoc")
    parser.add_argument("--expect")
    parser.add_argument("--csv-dir")
    args = parser.parse_args()
    scalars = read_scalars(args.event_file, load_proto_module(args.protoc))
    for tag, step, value in scalars:
        print(f"{tag}\t{step}\t{value:.9g}")
    if args.expect:
        expected = check_expected(scalars, args.expect)
        if args.csv_dir:
            check_csv(args.csv_dir, expected)


if __name__ == "__main__":
    main()
