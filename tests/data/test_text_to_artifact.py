#!/usr/bin/python3
"""From text to a compressed model, as the README's walkthrough runs it, with the real kgpt and
Debian's SentencePiece tools.

usage: test_text_to_artifact.py KGPT SOURCE_DIR WORKDIR

In WORKDIR/text_to_artifact, on Debian's fortune files (the package the setup installs):
1. `kgpt tokenizer train` makes a 1,024-piece BPE; `kgpt prepare --tokenizer sentencepiece` makes
   shards with it. Every line of every document equals what `spm_encode` (sentencepiece package, an
   independent reference) gives for that line, and every line is followed by the <0x0A> piece.
2. inputs/tiny_cpu_bpe.yaml trains 20 steps; `kgpt eval` gives the same val_bpb with the deck's .model
   and with the .vocab; `kgpt sample` continues a prompt through the model (and refuses a .vocab).
3. `kgpt export` writes an artifact smaller than a third of the fp32 tensors; `kgpt eval` of it is
   within 0.05 nats of the checkpoint's val loss and is recorded in the run's artifact.yaml, which
   postprocess/summarize.py shows; `kgpt inspect` and `kgpt sample` read the artifact.
4. Bad inputs end with exit code 2 and a message naming the file: a missing model, a file that is not
   a SentencePiece model, a model with more pieces than uint16 shards hold, a deck whose model has
   more pieces than model.vocab_size, a truncated and a corrupted artifact, an existing tokenizer.
"""

import glob
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np

KGPT, SOURCE_DIR, WORKDIR = sys.argv[1:4]
ROOT = os.path.join(WORKDIR, "text_to_artifact")
DECK = os.path.join(SOURCE_DIR, "inputs", "tiny_cpu_bpe.yaml")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")
ENV.pop("SLURM_NTASKS", None)
MODEL = "data/tokenizers/fortunes_bpe_1024.model"
VOCAB = "data/tokenizers/fortunes_bpe_1024.vocab"
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def kgpt(*args, expect=0):
    result = subprocess.run([KGPT, *args], cwd=ROOT, env=ENV, capture_output=True, timeout=900)
    out, err = result.stdout.decode("utf-8", "replace"), result.stderr.decode("utf-8", "replace")
    if expect is not None and result.returncode != expect:
        print(out, err)
        sys.exit(f"kgpt {' '.join(args)}: exit code {result.returncode}, expected {expect}")
    return result.returncode, out, err


def refused(what, args, needle):
    code, out, err = kgpt(*args, expect=None)
    check(code == 2, f"{what}: exit code {code}, expected 2 ({err.strip()})")
    check(needle in err, f"{what}: the message does not say {needle!r}: {err.strip()}")


def shard_tokens(pattern):
    tokens = []
    for path in sorted(glob.glob(pattern)):
        header = np.fromfile(path, dtype="<i4", count=256)
        tokens.append(np.fromfile(path, dtype="<u2", offset=1024, count=int(header[2])))
    return np.concatenate(tokens).astype(np.int64)


def check_against_spm_encode(texts):
    """Shards of every document in order (no val split) against spm_encode, line by line."""
    kgpt("prepare", "--tokenizer", "sentencepiece", "--model", MODEL, "--input", *texts, "--out", "data/all",
         "--prefix", "all", "--val-fraction", "0", "--doc-delimiter", "%", "--quiet")
    meta = open(os.path.join(ROOT, "data/all/all_prepare.yaml")).read()
    bos = int(re.search(r"^document_boundary: (\d+)", meta, re.M).group(1))
    newline = int(re.search(r"^line_break: (\d+)", meta, re.M).group(1))
    # The documents' lines as kgpt wrote them: each line is followed by a line break.
    tokens = shard_tokens(os.path.join(ROOT, "data/all/all_train_*.bin"))
    check(tokens[0] == bos, "the shard does not start with the document token")
    ours = []
    documents = 0
    for document in np.split(tokens, np.flatnonzero(tokens == bos))[1:]:
        documents += 1
        body = document[1:]
        check(len(body) and body[-1] == newline, "a document does not end with a line break")
        ours.extend(list(map(int, line)) for line in np.split(body, np.flatnonzero(body == newline) + 1)[:-1])
    ours = [line[:-1] for line in ours]  # without the line break itself
    # The same lines, delimiters left out, through spm_encode.
    lines = []
    for path in texts:
        data = open(path, "rb").read()
        parts = data.split(b"\n")
        if parts and parts[-1] == b"":
            parts.pop()
        lines.extend(p for p in parts if p.rstrip(b"\r") != b"%")
    with open(os.path.join(ROOT, "lines.txt"), "wb") as f:
        f.write(b"".join(line + b"\n" for line in lines))
    encoded = subprocess.run(["spm_encode", f"--model={os.path.join(ROOT, MODEL)}", "--output_format=id",
                              os.path.join(ROOT, "lines.txt")], capture_output=True, check=True).stdout
    reference = [[int(t) for t in line.split()] for line in encoded.decode().split("\n")[:len(lines)]]
    check(len(ours) == len(reference), f"{len(ours)} lines in the shards, {len(reference)} from spm_encode")
    mismatches = [i for i, (a, b) in enumerate(zip(ours, reference)) if a != b]
    check(not mismatches, f"{len(mismatches)} lines differ from spm_encode, first {mismatches[:3]}")
    print(f"spm_encode: {len(reference)} lines of {documents} documents agree token for token")


def crafted_large_model(path, pieces):
    """The trained model with pieces appended (ModelProto field 1, SentencePiece piece/score/type)."""
    data = bytearray(open(os.path.join(ROOT, MODEL), "rb").read())
    for i in range(pieces):
        name = f"zz{i:06d}".encode()
        inner = b"\x0a" + bytes([len(name)]) + name + b"\x15" + struct.pack("<f", -99.0) + b"\x18\x01"
        data += b"\x0a" + bytes([len(inner)]) + inner
    open(path, "wb").write(bytes(data))


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    texts = subprocess.run(["bash", os.path.join(SOURCE_DIR, "scripts", "english_fortunes.sh")], check=True, capture_output=True,
                           text=True).stdout.split()  # as scripts/setup.sh
    if not texts:
        sys.exit("no fortune files in /usr/share/games/fortunes (the setup installs the package fortunes)")

    # 1. Tokenizer and shards.
    _, out, _ = kgpt("tokenizer", "train", "--input", *texts, "--vocab-size", "1024", "--out",
                     MODEL[:-len(".model")], "--doc-delimiter", "%", "--quiet")
    check("trained a bpe tokenizer of 1024 pieces" in out, f"tokenizer train: {out}")
    kgpt("prepare", "--tokenizer", "sentencepiece", "--model", MODEL, "--input", *texts, "--out", "data/tiny_cpu_bpe",
         "--prefix", "fortunes", "--val-fraction", "0.05", "--doc-delimiter", "%", "--quiet")
    check_against_spm_encode(texts)

    # 2. Train, evaluate with the model and with its vocabulary, sample.
    kgpt("train", DECK, "--run-dir", "runs/bpe", "--set", "train.iterations=20", "--set", "train.eval_every=20",
         "--set", "train.warmdown_iters=5", "--set", "train.val_tokens=16384")
    checkpoint = "runs/bpe/checkpoints/ckpt_00000020.h5"
    _, by_model, _ = kgpt("eval", checkpoint)
    _, by_vocab, _ = kgpt("eval", checkpoint, "--set", f"data.vocab_file={VOCAB}")
    figures = [re.sub(r" eval_s:\S+", "", line) for line in (by_model, by_vocab)]  # all but the wall time
    check(figures[0] == figures[1], f"val_bpb differs between the .model and the .vocab:\n{by_model}{by_vocab}")
    loss = float(re.search(r"val_loss:([0-9.]+)", by_model).group(1))
    _, sampled, _ = kgpt("sample", checkpoint, "--prompt", "Q: What", "--max-new-tokens", "40", "--seed", "2")
    check(sampled.startswith("Q: What") and len(sampled.strip()) > len("Q: What") + 10, f"sample: {sampled!r}")
    refused("sample with a .vocab", ["sample", checkpoint, "--set", f"data.vocab_file={VOCAB}"],
            "name the .model with --set data.vocab_file")

    # 3. Export, the artifact's round trip, its record, inspect and sample.
    _, exported, _ = kgpt("export", checkpoint, "--out", "artifacts/bpe.int8z")
    size = int(re.search(r"bytes:(\d+)", exported).group(1))
    float_bytes = int(re.search(r"float32_bytes:(\d+)", exported).group(1))
    check(size == os.path.getsize(os.path.join(ROOT, "artifacts/bpe.int8z")), "export: bytes is not the file's size")
    check(size * 3 < float_bytes, f"the artifact ({size} bytes) is not below a third of the fp32 tensors ({float_bytes})")
    check("int8 per row" in exported and "recorded in" in exported, f"export output: {exported}")
    _, roundtrip, _ = kgpt("eval", "artifacts/bpe.int8z")
    artifact_loss = float(re.search(r"val_loss:([0-9.]+)", roundtrip).group(1))
    check(roundtrip.startswith("artifact:artifacts/bpe.int8z step:20"), f"eval of the artifact: {roundtrip}")
    check(abs(artifact_loss - loss) < 0.05, f"round-trip val loss {artifact_loss} vs the checkpoint's {loss}")
    record = open(os.path.join(ROOT, "runs/bpe/artifact.yaml")).read()
    check(f"bytes: {size}" in record and "roundtrip_val_bpb:" in record, f"artifact.yaml: {record}")
    summary = subprocess.run(["/usr/bin/python3", os.path.join(SOURCE_DIR, "postprocess/summarize.py"),
                              os.path.join(ROOT, "runs/bpe")], capture_output=True, text=True)
    check(summary.returncode == 0 and "artifact_bytes" in summary.stdout and f"| {size} | 20 |" in summary.stdout,
          f"summarize.py: {summary.stdout}{summary.stderr}")
    _, inspected, _ = kgpt("inspect", "artifacts/bpe.int8z")
    check("kgpt artifact" in inspected and "tok_emb.weight (1024, 384) int8 per row" in inspected, f"inspect: {inspected}")
    kgpt("sample", "artifacts/bpe.int8z", "--max-new-tokens", "10")

    # A gpt2 model of the same data exported for transformers carries the SentencePiece model.
    kgpt("train", DECK, "--run-dir", "runs/bpe_gpt2", "--set", "model.family=gpt2", "--set", "model.n_kv_head=4",
         "--set", "model.logit_softcap=0", "--set", "train.iterations=2", "--set", "train.eval_every=0",
         "--set", "run.checkpoint_every=2", "--set", "train.val_tokens=16384")
    _, hf, _ = kgpt("export", "runs/bpe_gpt2/checkpoints/ckpt_00000002.h5", "--format", "hf", "--out", "artifacts/bpe_hf")
    check("files:config.json,model.safetensors,tokenizer.model" in hf, f"hf export: {hf}")
    check(open(os.path.join(ROOT, "artifacts/bpe_hf/tokenizer.model"), "rb").read() ==
          open(os.path.join(ROOT, MODEL), "rb").read(), "the exported tokenizer.model is not the deck's .model")

    # 4. Bad inputs.
    refused("prepare with a missing model", ["prepare", "--tokenizer", "sentencepiece", "--model", "none.model",
                                             "--input", texts[0], "--out", "data/bad"], "none.model: cannot open")
    refused("prepare with a .vocab as model", ["prepare", "--tokenizer", "sentencepiece", "--model", VOCAB,
                                               "--input", texts[0], "--out", "data/bad"], "not a SentencePiece model")
    crafted_large_model(os.path.join(ROOT, "huge.model"), 65536 - 1024 + 1)
    refused("prepare with 65,537 pieces", ["prepare", "--tokenizer", "sentencepiece", "--model", "huge.model",
                                           "--input", texts[0], "--out", "data/bad"], "at most 65536 fit")
    check(not os.path.exists(os.path.join(ROOT, "data/bad")), "a refused prepare left an output folder")
    refused("a deck whose model outgrows model.vocab_size", ["check", DECK, "--set", "model.vocab_size=512"],
            "data.vocab_file: data/tokenizers/fortunes_bpe_1024.model: the model has 1024 pieces, more than model.vocab_size = 512")
    whole = open(os.path.join(ROOT, "artifacts/bpe.int8z"), "rb").read()
    open(os.path.join(ROOT, "truncated.int8z"), "wb").write(whole[: len(whole) // 2])
    refused("eval of a truncated artifact", ["eval", "truncated.int8z"], "truncated.int8z: the artifact is truncated or corrupted")
    damaged = bytearray(whole)
    damaged[len(damaged) // 2] ^= 0x40
    open(os.path.join(ROOT, "damaged.int8z"), "wb").write(bytes(damaged))
    refused("eval of a corrupted artifact", ["eval", "damaged.int8z"], "damaged.int8z: the artifact is")
    refused("inspect of a corrupted artifact", ["inspect", "damaged.int8z"], "damaged.int8z: the artifact is")
    refused("tokenizer over an existing model", ["tokenizer", "train", "--input", texts[0], "--out", MODEL[:-len(".model")]],
            "already exists")

    if failures:
        sys.exit(f"{len(failures)} checks failed")
    print("text to artifact: all checks passed")


if __name__ == "__main__":
    main()
