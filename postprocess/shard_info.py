#!/usr/bin/python3
"""Summarise kgpt token shards: header check, token count, id range, and a peek at the text.

usage: shard_info.py [--vocab-size N] [--peek N] [--csv] SHARD_OR_GLOB...

Reads shards written by `kgpt prepare` (or parameter-golf / llm.c shards): a 256 x int32 header
(magic 20240520, version 1, token count) followed by uint16 tokens. With the byte tokenizer,
--peek N prints the first N tokens of each shard as text (token 256, the document boundary,
shows as a newline and '<doc>'). Exit code 2 when a file is missing or not a valid shard.
"""
import argparse
import glob
import os
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
    args = parser.parse_args(argv)

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
        documents = int(np.count_nonzero(tokens == BOUNDARY))
        total += tokens.size
        if args.csv:
            print(f"{path},{tokens.size},{low},{high},{distinct},{documents}")
        else:
            print(f"{path:50} {tokens.size:>12,} {low:>6} {high:>6} {distinct:>8} {documents:>8,}")
        if args.peek:
            print(peek_text(tokens[: args.peek]))
    if not args.csv:
        print(f"{len(files)} shards, {total:,} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
