#!/usr/bin/python3
"""Summarise kgpt token shards: header check, token count, id range, and a peek at the text.

usage: shard_info.py [--vocab-size N] [--peek N] [--csv] [--tokenizer KIND --vocab FILE [--encoding NAME]]
                     [--kgpt PATH] SHARD_OR_GLOB...

Reads shards written by `kgpt prepare` (or parameter-golf / llm.c shards): a 256 x int32 header
(magic 20240520, version 1, token count) followed by uint16 tokens. The tokenizer is the one the
<prefix>_prepare.yaml beside a shard records (kgpt prepare writes it), else --tokenizer byte,
sentencepiece or tiktoken with --vocab (a .model, a .tiktoken rank file or GPT-2's encoder.json)
and --encoding, for shards made elsewhere (llm.c's GPT-2 shards: --tokenizer tiktoken --vocab
gpt2.tiktoken). Documents are counted by its document token (256 for bytes, <|endoftext|> for
tiktoken, <s> for SentencePiece). --peek N prints the first N tokens of each shard as text:
bytes directly (token 256 shows as a newline and '<doc>'), the others through `kgpt tokenizer
decode` (--kgpt, default build/kgpt beside this folder). Exit code 2 when a file is missing or not
a valid shard.
"""
import argparse
import glob
import os
import subprocess
import sys

import numpy as np

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
BOUNDARY = 256


class ShardError(Exception):
    pass


def read_shard(path):
    """Returns the tokens of one shard as a uint16 array, after checking its header and size."""
    size = os.path.getsize(path)
    if size < HEADER_INTS * 4:
        raise ShardError(f"{path}: {size} bytes, shorter than the 1024-byte header")
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header[0] != MAGIC:
        raise ShardError(f"{path}: magic number is {header[0]}, expected {MAGIC}")
    if header[1] != VERSION:
        raise ShardError(f"{path}: version {header[1]}, expected {VERSION}")
    count = int(header[2])
    if size != HEADER_INTS * 4 + 2 * count:
        raise ShardError(f"{path}: {size} bytes but the header promises {count} tokens ({HEADER_INTS * 4 + 2 * count} bytes)")
    return np.fromfile(path, dtype="<u2", offset=HEADER_INTS * 4, count=count)


def prepare_record(path):
    """The key: value lines of the <prefix>_prepare.yaml beside a shard, or {}."""
    name = os.path.basename(path)
    for split in ("_train_", "_val_"):
        if split in name:
            record = os.path.join(os.path.dirname(path), name[:name.rindex(split)] + "_prepare.yaml")
            if os.path.exists(record):
                values = {}
                for line in open(record, encoding="utf-8"):
                    if ":" in line and not line.startswith((" ", "#")):
                        key, value = line.split(":", 1)
                        values[key.strip()] = value.split("#")[0].strip().strip('"')
                return values
    return {}


class Tokenizer:
    """How a shard's ids become text: from the command line, else from its prepare record."""

    def __init__(self, args, path):
        record = prepare_record(path)
        self.kind = args.tokenizer or record.get("tokenizer", "byte")
        self.vocab = args.vocab or record.get("model" if self.kind == "sentencepiece" else "vocab_file", "")
        self.encoding = args.encoding or record.get("encoding", "auto")
        self.kgpt = args.kgpt
        if "document_boundary" in record and not args.tokenizer:
            self.document = int(record["document_boundary"])
        elif self.kind == "byte":
            self.document = BOUNDARY
        else:
            self.document = self.special_id()

    def special_id(self):
        """The document token of a vocabulary, asked of kgpt (tiktoken: <|endoftext|>)."""
        if self.kind != "tiktoken":
            return None
        run = subprocess.run([self.kgpt, "tokenizer", "encode", "--tokenizer", "tiktoken", "--vocab", self.vocab,
                              "--encoding", self.encoding, "--allow-special"], input=b"<|endoftext|>",
                             capture_output=True)
        if run.returncode != 0:
            raise ShardError(run.stderr.decode(errors="replace").strip())
        return int(run.stdout.split()[0])

    def text(self, tokens):
        if self.kind == "byte":
            return peek_text(tokens)
        command = [self.kgpt, "tokenizer", "decode", "--tokenizer", self.kind, "--vocab", self.vocab]
        if self.kind == "tiktoken":
            command += ["--encoding", self.encoding]
        run = subprocess.run(command, input=" ".join(str(t) for t in tokens.tolist()).encode(), capture_output=True)
        if run.returncode != 0:
            raise ShardError(run.stderr.decode(errors="replace").strip())
        return run.stdout.decode("utf-8", errors="replace")


def peek_text(tokens):
    pieces = []
    for t in tokens.tolist():
        pieces.append(b"\n<doc>" if t == BOUNDARY else bytes([t]) if t < 256 else f"<{t}>".encode())
    return b"".join(pieces).decode("utf-8", errors="replace")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shards", nargs="+", help="shard files or glob patterns")
    parser.add_argument("--vocab-size", type=int, default=None, help="fail if a token id is not below N")
    parser.add_argument("--peek", type=int, default=0, metavar="N", help="print the first N tokens as byte text")
    parser.add_argument("--csv", action="store_true", help="print one CSV row per shard instead of a table")
    parser.add_argument("--tokenizer", choices=["byte", "sentencepiece", "tiktoken"],
                        help="the shards' tokenizer (default: their prepare record's, else byte)")
    parser.add_argument("--vocab", default="", help="its file: a .model, a .tiktoken or encoder.json")
    parser.add_argument("--encoding", default="", help="the tiktoken encoding (default auto)")
    parser.add_argument("--kgpt", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                       "build", "kgpt"), help="the kgpt that decodes (default build/kgpt)")
    args = parser.parse_args(argv)
    if args.tokenizer in ("sentencepiece", "tiktoken") and not args.vocab:
        parser.error(f"--tokenizer {args.tokenizer} needs --vocab FILE")

    files = []
    for pattern in args.shards:
        matches = sorted(glob.glob(pattern))
        if not matches:
            print(f"shard_info.py: error: {pattern}: no such file", file=sys.stderr)
            return 2
        files.extend(matches)

    print("file,tokens,min_id,max_id,distinct_ids,documents" if args.csv else
          f"{'file':50} {'tokens':>12} {'min':>6} {'max':>6} {'distinct':>8} {'docs':>8}")
    total = 0
    for path in files:
        try:
            tokens = read_shard(path)
        except (ShardError, OSError) as error:
            print(f"shard_info.py: error: {error}", file=sys.stderr)
            return 2
        if tokens.size and args.vocab_size is not None and int(tokens.max()) >= args.vocab_size:
            index = int(np.argmax(tokens >= args.vocab_size))
            print(f"shard_info.py: error: {path}: token {tokens[index]} at index {index} is not below "
                  f"the vocabulary size {args.vocab_size}", file=sys.stderr)
            return 2
        low, high = (int(tokens.min()), int(tokens.max())) if tokens.size else (0, 0)
        distinct = int(np.unique(tokens).size)
        try:
            tokenizer = Tokenizer(args, path)
        except ShardError as error:
            print(f"shard_info.py: error: {path}: {error}", file=sys.stderr)
            return 2
        documents = int(np.count_nonzero(tokens == tokenizer.document)) if tokenizer.document is not None else 0
        total += tokens.size
        if args.csv:
            print(f"{path},{tokens.size},{low},{high},{distinct},{documents}")
        else:
            print(f"{path:50} {tokens.size:>12,} {low:>6} {high:>6} {distinct:>8} {documents:>8,}")
        if args.peek:
            try:
                print(tokenizer.text(tokens[: args.peek]))
            except ShardError as error:
                print(f"shard_info.py: error: {path}: {error}", file=sys.stderr)
                return 2
    if not args.csv:
        print(f"{len(files)} shards, {total:,} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
