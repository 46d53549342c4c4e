#!/usr/bin/python3
"""Writes tiktoken's rank files from npm's tiktoken package, for kgpt's data.tokenizer: tiktoken.

    scripts/tiktoken_ranks.py NODE_MODULES OUT_DIR

NODE_MODULES holds npm's `tiktoken` (scripts/setup.sh installs it into build/npm-reference/). For
each encoding it ships (gpt2, r50k_base, p50k_base, p50k_edit, cl100k_base, o200k_base) this
writes OUT_DIR/NAME.tiktoken in tiktoken's own format, one "base64-of-the-bytes rank" a line, and
GPT-2's pair OUT_DIR/encoder.json + OUT_DIR/vocab.bpe from the gpt2 ranks: each token's merge is
the split that BPE with only the lower ranks leaves it in. Works offline.
"""
import base64
import json
import os
import sys

ENCODINGS = ["gpt2", "r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base"]


def write_rank_file(modules, name, out_dir):
    """encoders/NAME.json's bpe_ranks ("! OFFSET b64 b64 ..." lines) as NAME.tiktoken; the ranks."""
    spec = json.load(open(os.path.join(modules, "tiktoken", "encoders", name + ".json")))
    ranks = {}
    with open(os.path.join(out_dir, name + ".tiktoken"), "w") as out:
        for line in spec["bpe_ranks"].split("\n"):
            if not line:
                continue
            fields = line.split(" ")
            offset = int(fields[1])
            for k, token in enumerate(fields[2:]):
                out.write(f"{token} {offset + k}\n")
                ranks[base64.b64decode(token)] = offset + k
    return ranks


def write_gpt2_pair(ranks, end_of_text, out_dir):
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    spelled = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in spelled:
            spelled[b] = chr(256 + extra)
            extra += 1

    def spell(data):
        return "".join(spelled[b] for b in data)

    def split(token, limit):
        parts = [bytes([b]) for b in token]
        while True:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < limit and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                return parts
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]

    by_rank = sorted(ranks.items(), key=lambda item: item[1])
    with open(os.path.join(out_dir, "vocab.bpe"), "w", encoding="utf-8") as merges:
        merges.write("#version: 0.2\n")
        for token, rank in by_rank:
            if len(token) == 1:
                continue
            parts = split(token, rank)
            if len(parts) != 2:
                sys.exit(f"rank {rank}: BPE over the lower ranks leaves {len(parts)} parts, not the two of a merge")
            merges.write(f"{spell(parts[0])} {spell(parts[1])}\n")
    encoder = {spell(token): rank for token, rank in by_rank}
    encoder["<|endoftext|>"] = end_of_text
    with open(os.path.join(out_dir, "encoder.json"), "w", encoding="utf-8") as f:
        json.dump(encoder, f, ensure_ascii=False)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    modules, out_dir = sys.argv[1:3]
    if not os.path.isdir(os.path.join(modules, "tiktoken", "encoders")):
        sys.exit(f"{modules}: no npm tiktoken package here (scripts/setup.sh installs it into build/npm-reference/node_modules)")
    os.makedirs(out_dir, exist_ok=True)
    ranks = {name: write_rank_file(modules, name, out_dir) for name in ENCODINGS}
    write_gpt2_pair(ranks["gpt2"], 50256, out_dir)
    print(f"wrote {', '.join(n + '.tiktoken' for n in ENCODINGS)}, encoder.json and vocab.bpe in {out_dir}")


if __name__ == "__main__":
    main()
