#!/usr/bin/python3
"""val_bpb against an independent count of the val text's bytes, with the real kgpt.

usage: test_val_bpb.py KGPT SOURCE_DIR WORKDIR

val_bpb = (val_loss / ln 2) * tokens / bytes, where bytes are the bytes of text the val targets
stand for. Here the val shards are written by hand, so the test knows their text:
- byte tokenizer: documents of UTF-8 text (multi-byte characters, spaces, newlines) separated by the
  boundary token 256, one boundary where a sequence starts; bytes = the text's own UTF-8 bytes after
  the stream's first token, counted here from the documents;
- SentencePiece (a model made by `kgpt tokenizer train`, documents encoded here by Python's
  sentencepiece, each after <s>; characters the model has no piece for become byte-fallback pieces,
  <s> lands where sequences start): bytes by the definition kgpt shares with parameter-golf, written
  here from sentencepiece's own piece kinds (control and unknown 0, byte pieces 1, others their UTF-8
  length less a leading U+2581, plus 1 for it unless the previous token is a boundary), checked
  against the text sentencepiece decodes from each document;
- tiktoken (a small rank file made here, gpt2's split pattern and <|endoftext|> = 50256; documents
  encoded by `kgpt tokenizer encode`): bytes = each target's token bytes, read here from the rank
  file, <|endoftext|> standing for none; each document's tokens must give back its text.
`kgpt train` evaluates at steps 0 and 1; every val_bpb in history.h5 must equal val_loss / ln 2 *
tokens / bytes with this count, to 1e-12 relative (both sums are exact integers; the rest is one
division in double), with the deck's .model and with its .vocab.
"""

import base64
import math
import os
import shutil
import subprocess
import sys

import h5py
import sentencepiece as spm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shards import write_shard  # noqa: E402

KGPT, SOURCE_DIR, WORKDIR = sys.argv[1:4]
ROOT = os.path.join(WORKDIR, "val_bpb")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")
ENV.pop("SLURM_NTASKS", None)
SEQ = 16
BOUNDARY = 256
DOCS = [
    "The quick brown fox jumps over the lazy dog.",
    "naïve café: 20 °C, Straße — déjà vu",
    "  two leading spaces, then\ta tab",
    "日本語のテキストも数える",
    "line one\nline two\n\nafter a blank line",
    "emoji 🙂 and € signs ☃",
    "short",
]
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def aligned_stream(documents, boundary):
    """Documents (token lists) each after `boundary`, the stream cut to k * SEQ + 1 tokens; one
    extra boundary moves the third document's start to the start of a sequence."""
    stream = []
    for i, doc in enumerate(documents):
        if i == 2:
            while len(stream) % SEQ != 0:
                stream.append(boundary)
        stream += [boundary] + list(doc)
    usable = (len(stream) - 1) // SEQ * SEQ
    return stream[: usable + 1]


def train_and_read(name, overrides):
    run_dir = os.path.join(ROOT, name)
    args = [KGPT, "train", os.path.join(SOURCE_DIR, "inputs", "tiny_cpu.yaml"), "--run-dir", run_dir,
            "--set", f"train.seq_len={SEQ}", "--set", "train.global_batch_tokens=128", "--set", "train.accum_total=1",
            "--set", "train.iterations=1", "--set", "train.eval_every=1", "--set", "train.warmdown_iters=0"]
    for o in overrides:
        args += ["--set", o]
    r = subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(f"{name}: kgpt train failed with exit code {r.returncode}")
    with h5py.File(os.path.join(run_dir, "history.h5"), "r") as f:
        return f["val/loss"][()], f["val/bpb"][()]


def check_bpb(name, overrides, tokens, text_bytes):
    # Back-to-back and sliding windows (train.eval_stride) score every val token once: the same
    # tokens and bytes.
    for stride in (0, 5):
        label = name if stride == 0 else f"{name}, eval_stride {stride}"
        losses, bpbs = train_and_read(label, overrides + [f"train.eval_stride={stride}"])
        check(len(losses) == 2, f"{label}: {len(losses)} evaluations, want 2 (steps 0 and 1)")
        for loss, bpb in zip(losses, bpbs):
            expected = loss / math.log(2) * tokens / text_bytes
            check(abs(bpb - expected) <= 1e-12 * expected,
                  f"{label}: val_bpb {bpb!r}, the independent count gives {expected!r} "
                  f"(loss {loss!r}, {tokens} tokens, {text_bytes} bytes)")
        print(f"{label}: {tokens} tokens, {text_bytes} bytes: val_bpb {bpbs[-1]:.6f} as counted here")


def byte_tokenizer():
    stream = aligned_stream([doc.encode("utf-8") for doc in DOCS], BOUNDARY)
    check(any(stream[k * SEQ] == BOUNDARY for k in range(1, (len(stream) - 1) // SEQ)),
          "bytes: a boundary where a sequence starts")
    # The text after the stream's first token: the documents' bytes, boundaries standing for none.
    text_bytes = len(bytes(t for t in stream[1:] if t != BOUNDARY))
    write_shard(os.path.join(ROOT, "bytes_val_000000.bin"), stream)
    write_shard(os.path.join(ROOT, "bytes_train_000000.bin"), (stream * 20)[:4000])
    check_bpb("byte tokenizer", ["data.train_files=bytes_train_*.bin", "data.val_files=bytes_val_*.bin",
                                 f"train.val_tokens={len(stream) - 1}"], len(stream) - 1, text_bytes)


def sentencepiece_bytes(sp, stream):
    """Bytes of text each target stands for after its previous token, by the definition, from
    sentencepiece's own idea of each piece."""
    boundary = [sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i) for i in range(sp.get_piece_size())]
    total = 0
    for previous, token in zip(stream[:-1], stream[1:]):
        if boundary[token]:
            continue
        if sp.is_byte(token):
            total += 1
            continue
        piece = sp.id_to_piece(token)
        if piece.startswith("\u2581"):
            total += (0 if boundary[previous] else 1)
            piece = piece[1:]
        total += len(piece.replace("\u2581", " ").encode("utf-8"))
    return total


def sentencepiece_tokenizer():
    training = os.path.join(ROOT, "sp_text.txt")
    with open(training, "w", encoding="utf-8") as f:
        for i in range(300):
            f.write(f"the quick brown fox {i} jumps over the lazy dog; a naive cafe line {i % 7}\n")
    prefix = os.path.join(ROOT, "sp")
    r = subprocess.run([KGPT, "tokenizer", "train", "--input", training, "--vocab-size", "320", "--out", prefix,
                        "--quiet"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit("kgpt tokenizer train failed")
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    bos = sp.bos_id()
    documents = [sp.encode(doc) for doc in DOCS]
    check(any(sp.is_byte(t) for doc in documents for t in doc), "sentencepiece: byte-fallback pieces in the val text")
    check(any(sp.id_to_piece(t).startswith("\u2581") for doc in documents for t in doc[1:]),
          "sentencepiece: pieces with a leading space inside documents")
    # The definition gives a document's decoded text, where the document starts with no space.
    for doc, ids in zip(DOCS, documents):
        if not doc.startswith(" "):
            counted = sentencepiece_bytes(sp, [bos] + ids)
            check(counted == len(sp.decode(ids).encode("utf-8")) == len(doc.encode("utf-8")),
                  f"sentencepiece: {doc!r}: {counted} bytes by the definition, "
                  f"{len(sp.decode(ids).encode('utf-8'))} decoded, {len(doc.encode('utf-8'))} in the text")
    stream = aligned_stream(documents, bos)
    check(any(stream[k * SEQ] == bos for k in range(1, (len(stream) - 1) // SEQ)),
          "sentencepiece: <s> where a sequence starts")
    text_bytes = sentencepiece_bytes(sp, stream)
    write_shard(os.path.join(ROOT, "sp_val_000000.bin"), stream)
    write_shard(os.path.join(ROOT, "sp_train_000000.bin"), (stream * 20)[:4000])
    common = ["data.tokenizer=sentencepiece", "model.vocab_size=320", "data.train_files=sp_train_*.bin",
              "data.val_files=sp_val_*.bin", f"train.val_tokens={len(stream) - 1}"]
    for vocab in ("sp.model", "sp.vocab"):
        check_bpb(f"sentencepiece ({vocab})", common + [f"data.vocab_file={vocab}"], len(stream) - 1, text_bytes)


def tiktoken_tokenizer():
    merged = [b"th", b"he", b"the", b" the", b"qu", b"ck", b" f", b"ox", b"\xc3\xa9", b" l", b"in", b"ine"]
    table = {b: bytes([b]) for b in range(256)}
    table.update({256 + i: token for i, token in enumerate(merged)})
    with open(os.path.join(ROOT, "toy.tiktoken"), "w") as f:
        for rank, token in sorted(table.items()):
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    documents = []
    for doc in DOCS:
        r = subprocess.run([KGPT, "tokenizer", "encode", "--tokenizer", "tiktoken", "--vocab", "toy.tiktoken",
                            "--encoding", "gpt2"], cwd=ROOT, input=doc.encode("utf-8"), capture_output=True, timeout=60)
        if r.returncode != 0:
            sys.exit(f"kgpt tokenizer encode failed: {r.stderr.decode()}")
        ids = [int(t) for t in r.stdout.split()]
        check(b"".join(table[t] for t in ids) == doc.encode("utf-8"), f"tiktoken: {doc!r} does not come back")
        documents.append(ids)
    check(any(t >= 256 for doc in documents for t in doc), "tiktoken: merged tokens in the val text")
    eot = 50256
    stream = aligned_stream(documents, eot)
    text_bytes = sum(len(table[t]) for t in stream[1:] if t != eot)
    write_shard(os.path.join(ROOT, "bpe_val_000000.bin"), stream)
    write_shard(os.path.join(ROOT, "bpe_train_000000.bin"), (stream * 20)[:4000])
    check_bpb("tiktoken", ["data.tokenizer=tiktoken", "data.vocab_file=toy.tiktoken", "data.tiktoken_encoding=gpt2",
                           "model.vocab_size=50257", "data.train_files=bpe_train_*.bin", "data.val_files=bpe_val_*.bin",
                           f"train.val_tokens={len(stream) - 1}"], len(stream) - 1, text_bytes)


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    byte_tokenizer()
    sentencepiece_tokenizer()
    tiktoken_tokenizer()
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("val_bpb: all checks passed")


main()
