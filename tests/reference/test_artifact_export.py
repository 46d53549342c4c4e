#!/usr/bin/python3
"""`kgpt export` with 4-8 bit weight groups and zstd against an independent numpy implementation of
the storage rules (src/io/artifact.hpp), with the real kgpt.

usage: test_artifact_export.py KGPT SOURCE_DIR WORKDIR

A small golf model trains 30 steps on hand-written shards, then is exported six ways (embed 8,
attention 6, mlp 5 bits with zstd, its codes packed, a byte each and the smaller of the two; the same
in bytes with brotli; every group in 4 bits with zlib; 7 bits with zstd), with --keep-float-max 1000
so that its small matrices are quantized. Each file is read here from its
bytes (header, zlib, zstd or brotli by Debian's python3-brotli, CRC-32, payload, codes unpacked bit
by bit), and its tensors are
checked against the checkpoint's weights (read with h5py) quantized by this file's own numpy code:
- fp16/fp32 tensors and 8-bit rows (torch.quantile's clip, the 1/127 floor) are equal bit for bit;
- 4-7 bit rows: every row's fp16 scale and codes equal the reference's, the clip chosen among the
  five candidates by the least squared error (rows whose two best candidates differ by less than
  1e-9 relative may take either: the two sum in different orders); packed and byte codes hold the
  same values, and export.code_layout: auto keeps the smaller file;
- `kgpt eval` of the artifact equals reference_models.py's Golf (float64) on the reference's
  dequantized weights to 2e-5 relative;
- `kgpt check` of the deck with the same export keys predicts the payload within the metadata's
  allowance and a bound no smaller than the file;
- fewer bits give smaller files and larger errors; export prints each group's bits and the
  16,000,000-byte limit;
- bad export keys end with exit code 2 naming the key.
"""

import math
import os
import re
import shutil
import struct
import sys
import zlib

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import yaml
import brotli
import zstandard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_models import FAMILIES  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from golf_runs import check, failures, golf_settings, runner, text_tokens  # noqa: E402
from shards import write_shard  # noqa: E402

KGPT, SOURCE_DIR, WORKDIR = sys.argv[1:4]
ROOT = os.path.join(WORKDIR, "artifact_export")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")
SEQ, VAL_TOKENS, KEEP = 16, 320, 1000
CONTROL = ("attn_scale", "mlp_scale", "resid_mix", "q_gain", "skip_weight")
CANDIDATES = (0.999, 0.9995, 0.9999, 0.99999, 1.0)
run = runner(ROOT, ENV)


# ---- the artifact file, read from its bytes ----

class Bytes:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        if self.at + n > len(self.data):
            sys.exit("the artifact's payload ends early")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def unpack(self, fmt):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def string(self):
        (n,) = self.unpack("I")
        return self.take(n).decode()

    def array(self, dtype, count):
        return np.frombuffer(self.take(np.dtype(dtype).itemsize * count), dtype=dtype).copy()


def unpack_codes(data, count, bits):
    """Codes of `bits` bits, least significant bit first."""
    bit_values = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")[:count * bits]
    weights = (1 << np.arange(bits)).astype(np.int64)
    return (bit_values.reshape(count, bits).astype(np.int64) * weights).sum(axis=1)


def read_artifact(path):
    whole = open(path, "rb").read()
    magic, version, codec, raw_size, crc, _ = struct.unpack("<8sIIQII", whole[:32])
    check(magic == b"KGPTINT8" and version == 2, f"{path}: header {magic} version {version}")
    body = whole[32:]
    raw = (zstandard.ZstdDecompressor().decompress(body) if codec == 1 else brotli.decompress(body) if codec == 2
           else zlib.decompress(body))
    check(len(raw) == raw_size and zlib.crc32(raw) == crc, f"{path}: payload size or CRC-32 differs from the header")
    r = Bytes(raw)
    deck, (step,) = r.string(), r.unpack("q")
    (entries,) = r.unpack("I")
    metadata = {r.string(): r.string() for _ in range(entries)}
    tensors = {}
    (count,) = r.unpack("I")
    for _ in range(count):
        name = r.string()
        (storage,), (rank,) = r.unpack("B"), r.unpack("I")
        shape = tuple(r.unpack("Q" * rank))
        n = int(np.prod(shape))
        t = {"storage": storage, "shape": shape}
        if storage == 0:  # int8 rows
            t["scales"], t["codes"] = r.array("<u2", shape[0]), r.array("i1", n).astype(np.int64)
        elif storage == 1:  # int8 over the tensor
            t["scale"], t["codes"] = r.array("<f4", 1), r.array("i1", n).astype(np.int64)
        elif storage == 2:
            t["values"] = r.array("<u2", n)
        elif storage == 3:
            t["values"] = r.array("<f4", n)
        elif storage == 4:  # packed rows
            (bits,) = r.unpack("B")
            limit = (1 << (bits - 1)) - 1
            t["bits"], t["scales"] = bits, r.array("<u2", shape[0])
            t["codes"] = unpack_codes(r.take((n * bits + 7) // 8), n, bits) - limit
        elif storage == 5:  # rows of codes a byte each
            (bits,) = r.unpack("B")
            t["bits"], t["scales"], t["codes"] = bits, r.array("<u2", shape[0]), r.array("i1", n).astype(np.int64)
        else:
            sys.exit(f"{path}: tensor {name} has storage {storage}")
        tensors[name] = t
    check(r.at == len(raw), f"{path}: {len(raw) - r.at} bytes after the last tensor")
    return {"codec": codec, "deck": deck, "step": step, "metadata": metadata, "tensors": tensors, "bytes": len(whole),
            "payload": len(raw)}


# ---- the storage rules, written from their definition ----

def packed_rows(w, bits):
    """Per row: the fp16 scale and codes of the least-error candidate clip; and whether the two best
    candidates' errors are too close to call."""
    limit = (1 << (bits - 1)) - 1
    rows, columns = w.shape
    scales = np.zeros(rows, dtype=np.float16)
    codes = np.zeros((rows, columns), dtype=np.int64)
    close = np.zeros(rows, dtype=bool)
    for i in range(rows):
        row = w[i]
        ordered = np.sort(np.abs(row)).astype(np.float64)
        tried = []
        for q in CANDIDATES:
            position = q * (columns - 1)
            low = int(math.floor(position))
            high = min(low + 1, columns - 1)
            clip = np.float32(ordered[low] + (ordered[high] - ordered[low]) * (position - low))
            scale16 = np.float16(min(clip / np.float32(limit), np.float32(65504.0)))
            s = np.float32(scale16)
            c = np.clip(np.rint(row / s), -limit, limit) if s > 0 else np.zeros(columns)
            error = float(np.sum((row.astype(np.float64) - c.astype(np.float64) * np.float64(s)) ** 2))
            tried.append((error, scale16, c.astype(np.int64)))
        order = sorted(range(len(tried)), key=lambda k: (tried[k][0], k))
        best, second = tried[order[0]], tried[order[1]]
        scales[i], codes[i] = best[1], best[2]
        close[i] = second[0] - best[0] <= 1e-9 * max(best[0], 1e-30) and not np.array_equal(best[2], second[2])
    return scales, codes, close


def int8_rows(w):
    """parameter-golf's baseline rule: torch.quantile's clip at 99.99984%, scale >= 1/127."""
    t = torch.tensor(w, dtype=torch.float32)
    clip = torch.quantile(t.abs(), 0.9999984, dim=1)
    scale = (clip / 127.0).clamp_min(1.0 / 127.0)
    clipped = torch.maximum(torch.minimum(t, clip[:, None]), -clip[:, None])
    codes = torch.clamp(torch.round(clipped / scale[:, None]), -127, 127)
    return scale.to(torch.float16).numpy(), codes.numpy().astype(np.int64)


def group_of(name):
    if name in ("tok_emb.weight", "lm_head.weight"):
        return "embed"
    if ".mlp." in name:
        return "mlp"
    if ".attn." in name and name.endswith(".weight"):
        return "attention"
    return "other"


def group_bits(name, bits):
    return bits.get(group_of(name), 8)


def stored_bytes(t):
    """The bytes a tensor's storage holds: codes, scales and floats."""
    n, rows = int(np.prod(t["shape"])), t["shape"][0] if t["shape"] else 1
    return {0: 2 * rows + n, 1: 4 + n, 2: 2 * n, 3: 4 * n, 5: 2 * rows + n}.get(t["storage"]) or \
        2 * rows + (n * t.get("bits", 8) + 7) // 8


def reference_tensor(name, w, bits):
    """The storage code and the dequantized values of one tensor, by the rules."""
    if w.size <= KEEP:
        if any(c in name for c in CONTROL):
            return 3, {"values": w.astype(np.float32)}, w.astype(np.float32)
        halves = w.astype(np.float16)
        return 2, {"values": halves}, halves.astype(np.float32)
    assert w.ndim == 2, name
    b = group_bits(name, bits)
    if b == 8:
        scales, codes = int8_rows(w)
        return 0, {"scales": scales, "codes": codes}, (codes * scales.astype(np.float32)[:, None]).astype(np.float32)
    scales, codes, close = packed_rows(w, b)
    return 4, {"scales": scales, "codes": codes, "close": close, "bits": b}, \
        (codes * scales.astype(np.float32)[:, None]).astype(np.float32)


def compare(label, artifact, weights, bits):
    """Every tensor of the artifact against the reference; returns the reference's dequantized weights."""
    dequantized, worst = {}, {}
    check(set(artifact["tensors"]) == set(weights), f"{label}: tensor names differ from the checkpoint's")
    for name, w in weights.items():
        t = artifact["tensors"][name]
        storage, ref, values = reference_tensor(name, w, bits)
        dequantized[name] = values
        if t["storage"] != storage and not (storage == 4 and t["storage"] == 5):
            check(False, f"{label}: {name} stored as {t['storage']}, the rules say {storage}")
            continue
        if storage in (2, 3):
            check(np.array_equal(t["values"], ref["values"].reshape(-1).view(t["values"].dtype)),
                  f"{label}: {name}'s floats differ")
            continue
        codes = t["codes"].reshape(w.shape)
        same_scale = t["scales"] == ref["scales"].view(np.uint16)
        same_codes = (codes == ref["codes"]).all(axis=1)
        agree = same_scale & same_codes
        if storage == 4:
            check(t["bits"] == ref["bits"], f"{label}: {name} in {t['bits']} bits, want {ref['bits']}")
            agree |= ref["close"]
        rows = int((~agree).sum())
        check(rows == 0, f"{label}: {name}: {rows} of {w.shape[0]} rows differ from the reference "
                         f"(first {int(np.argmin(agree))})")
        error = np.sqrt(np.mean((values.astype(np.float64) - w) ** 2))
        worst[name] = error
    return dequantized, worst


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    write_shard(os.path.join(ROOT, "train_000000.bin"), text_tokens(1, 20000))
    val = text_tokens(2, VAL_TOKENS + 1)
    write_shard(os.path.join(ROOT, "val_000000.bin"), val)
    run_dir = os.path.join(ROOT, "run")
    sets = ["data.train_files=train_*.bin", "data.val_files=val_*.bin", f"train.seq_len={SEQ}",
            "train.global_batch_tokens=256", "train.accum_total=1", "train.iterations=30", "train.eval_every=0",
            "train.warmdown_iters=0", f"train.val_tokens={VAL_TOKENS}", "model.n_layer=2", "model.d_model=48",
            "model.n_head=2", "model.n_kv_head=1", "model.mlp_mult=3"]
    # The decks go by paths relative to ROOT: their resolved text, which the artifact carries and kgpt
    # check's plan counts, names the deck beside every key, and must not grow with the checkout's path.
    shutil.copy(os.path.join(SOURCE_DIR, "inputs", "tiny_cpu.yaml"), ROOT)
    args = [KGPT, "train", "tiny_cpu.yaml", "--run-dir", "run"]
    for s in sets:
        args += ["--set", s]
    run(args)
    checkpoint = os.path.join(run_dir, "checkpoints", sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1])
    with h5py.File(checkpoint, "r") as f:
        deck = f["metadata/deck"][()]
        deck = yaml.safe_load(deck.decode() if isinstance(deck, bytes) else deck)
        weights = {name: np.array(f["params"][name], dtype=np.float32) for name in f["params"]}

    ways = [("mixed", {"embed": 8, "attention": 6, "mlp": 5}, "zstd", "packed"),
            ("mixed_bytes", {"embed": 8, "attention": 6, "mlp": 5}, "zstd", "bytes"),
            ("mixed_auto", {"embed": 8, "attention": 6, "mlp": 5}, "zstd", "auto"),
            ("mixed_brotli", {"embed": 8, "attention": 6, "mlp": 5}, "brotli", "bytes"),
            ("int4", {"embed": 4, "attention": 4, "mlp": 4}, "zlib", "packed"),
            ("int7", {"embed": 7, "attention": 7, "mlp": 7}, "zstd", "auto")]
    results = {}
    for label, bits, compression, layout in ways:
        out = os.path.join(ROOT, f"{label}.kgptz")
        export = [KGPT, "export", checkpoint, "--out", out, "--keep-float-max", str(KEEP),
                  "--set", f"export.compression={compression}", "--set", f"export.code_layout={layout}"]
        for group, b in bits.items():
            export += ["--set", f"export.{group}_bits={b}"]
        printed = run(export).stdout
        artifact = read_artifact(out)
        check(artifact["codec"] == {"zlib": 0, "zstd": 1, "brotli": 2}[compression], f"{label}: compressor {artifact['codec']}")
        kinds = {t["storage"] for t in artifact["tensors"].values()}
        chosen = re.search(r" codes:(\w+) ", printed)
        check(chosen is not None and (layout == "auto" or chosen.group(1) == layout),
              f"{label}: export's codes: {chosen.group(0) if chosen else None}, asked {layout}")
        check((4 in kinds) != (5 in kinds) and ((5 in kinds) == (chosen is not None and chosen.group(1) == "bytes")),
              f"{label}: storages {kinds} for codes {chosen.group(1) if chosen else None}")
        summary = re.search(r"^artifact:.*$", printed, re.M)
        summary = summary.group(0) if summary else printed
        tensor_bytes = sum(stored_bytes(t) for t in artifact["tensors"].values())
        check(f"bytes:{artifact['bytes']} " in summary and f"payload_bytes:{tensor_bytes} " in summary,
              f"{label}: export's figures are not the file's ({artifact['bytes']} bytes, {tensor_bytes} of tensors): {summary}")
        check("limit:16000000 fits" in summary, f"{label}: export does not set the file against the limit")
        for group, b in bits.items():
            check(re.search(rf"^group:{group} bits:{b} ", printed, re.M) is not None,
                  f"{label}: export prints no line for group {group} at {b} bits")
        check(f"mlp_bits={bits['mlp']}" in artifact["metadata"].get("export", ""),
              f"{label}: metadata export: {artifact['metadata']}")
        dequantized, errors = compare(label, artifact, weights, bits)
        results[label] = (artifact, dequantized, errors)

        # What kgpt check predicts for the same deck and export keys.
        predict = [KGPT, "check", os.path.join("run", "deck.yaml"), "--no-data", "--set", f"export.code_layout={layout}",
                   "--set", f"export.compression={compression}", "--set", f"export.keep_float_max={KEEP}"]
        for group, b in bits.items():
            predict += ["--set", f"export.{group}_bits={b}"]
        said = run(predict).stderr
        found = re.search(r"artifact \(kgpt export, (\w+)\): payload ([0-9,]+) bytes .*at most ([0-9,]+) bytes", said)
        if not found:
            check(False, f"{label}: kgpt check predicts no artifact: {said}")
            continue
        payload, largest = int(found.group(2).replace(",", "")), int(found.group(3).replace(",", ""))
        check(found.group(1) == compression, f"{label}: kgpt check plans {found.group(1)}")
        # Each group's tensor bytes are exact; the deck's text (its comments name other sources) and
        # the two paths differ from the checkpoint's.
        for group in ("embed", "attention", "mlp", "other"):
            planned = re.search(rf"[(; ]{group} ([0-9,]+) in \d+ tensors, (\d)-bit rows", said)
            # auto plans packed codes, whose compressed file bounds the smaller one it keeps.
            held = sum(stored_bytes(dict(t, storage=4) if layout == "auto" and t["storage"] == 5 else t)
                       for name, t in artifact["tensors"].items() if group_of(name) == group)
            check(planned is not None and int(planned.group(1).replace(",", "")) == held,
                  f"{label}: kgpt check plans {planned.group(0) if planned else 'nothing'} for {group}, the file holds {held}")
        check(abs(payload - artifact["payload"]) <= 8192,
              f"{label}: kgpt check predicts a payload of {payload} bytes, the file's is {artifact['payload']}")
        check(largest >= artifact["bytes"], f"{label}: the predicted bound {largest} is below the file's {artifact['bytes']}")
        print(f"{label}: {artifact['bytes']} bytes ({artifact['payload']} payload; predicted {payload}, at most {largest})")

    # The same codes either way; auto keeps the smaller file.
    packed, byte_codes, auto = (results[k][0] for k in ("mixed", "mixed_bytes", "mixed_auto"))
    same = all(np.array_equal(packed["tensors"][n]["codes"], byte_codes["tensors"][n]["codes"])
               for n in packed["tensors"] if "codes" in packed["tensors"][n])
    check(same, "packed and byte codes differ")
    # brotli stores what zstd does: the same tensors, bit for bit.
    by_brotli = results["mixed_brotli"][0]
    check(set(by_brotli["tensors"]) == set(byte_codes["tensors"]) and
          all(set(t) == set(by_brotli["tensors"][n]) and
              all(np.array_equal(np.asarray(t[k]), np.asarray(by_brotli["tensors"][n][k])) for k in t)
              for n, t in byte_codes["tensors"].items()),
          "brotli's file holds other tensors than zstd's")
    smaller = 4 if packed["bytes"] <= byte_codes["bytes"] else 5
    kept = {t["storage"] for t in auto["tensors"].values()}
    # The files differ only by their metadata's "code_layout=auto" from the one kept.
    check(smaller in kept and abs(auto["bytes"] - min(packed["bytes"], byte_codes["bytes"])) <= 8,
          f"auto wrote {auto['bytes']} bytes ({kept}); packed {packed['bytes']}, bytes {byte_codes['bytes']}")

    # Fewer bits: a smaller file and a larger error in the packed groups.
    mixed, int4, int7 = (results[k] for k in ("mixed", "int4", "int7"))
    check(int4[0]["payload"] < int7[0]["payload"], f"4-bit payload {int4[0]['payload']} not below 7-bit {int7[0]['payload']}")
    for name in (n for n in weights if ".mlp." in n and n in int4[2]):
        check(int4[2][name] > mixed[2][name] > int7[2][name],
              f"{name}: rms errors 4/5/7 bits {int4[2][name]:.3g} {mixed[2][name]:.3g} {int7[2][name]:.3g} do not fall with bits")

    # The artifact evaluates as the reference model on the reference's dequantized weights.
    settings = golf_settings(deck["model"])
    torch.set_default_dtype(torch.float64)
    params = {k: torch.tensor(v, dtype=torch.float64) for k, v in mixed[1].items()}
    model = FAMILIES["golf"](params, settings)
    x = torch.tensor(val[:VAL_TOKENS + 1], dtype=torch.long)
    with torch.no_grad():
        logits = model.logits(x[:VAL_TOKENS].view(-1, SEQ))
        expected = float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), x[1:].reshape(-1)))
    line = run([KGPT, "eval", os.path.join(ROOT, "mixed.kgptz")]).stdout
    found = re.search(r"val_loss:([0-9.]+)", line)
    loss = float(found.group(1)) if found else float("nan")
    check(abs(loss - expected) <= 2e-5 * expected, f"eval of the mixed artifact: kgpt {loss}, reference {expected:.6f}")
    print(f"mixed artifact: kgpt val_loss {loss:.6f}, reference {expected:.6f}")
    inspected = run([KGPT, "inspect", os.path.join(ROOT, "mixed.kgptz")]).stdout
    check("kgpt artifact (zstd)" in inspected and "int5 per row" in inspected and "int6 per row" in inspected,
          f"inspect of the mixed artifact: {inspected}")

    # Bad export keys: exit 2, naming the key.
    for bad, named in (("export.mlp_bits=3", "export.mlp_bits"), ("export.compression=lzma", "export.compression"),
                       ("model.n_layer=3", "export.key")):
        r = run([KGPT, "export", checkpoint, "--out", os.path.join(ROOT, "bad.kgptz"), "--set", bad], expect=2)
        check(named in r.stderr, f"export --set {bad}: stderr does not name {named}: {r.stderr}")
    check(not os.path.exists(os.path.join(ROOT, "bad.kgptz")), "a refused export wrote its file")
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("artifact export: all checks passed")


main()
