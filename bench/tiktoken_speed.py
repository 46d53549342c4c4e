#!/usr/bin/python3
"""Encode speed of kgpt's tiktoken BPE beside npm's tiktoken (Rust compiled to WebAssembly), on one
core, the same text, every encoding; and `kgpt prepare --tokenizer tiktoken` on 1 and 2 MPI ranks.

usage: tiktoken_speed.py KGPT NPM_PREFIX [--megabytes M] [--repeats R] [--ranks N] [--prepare-copies C]

The text is Debian's fortunes (English, then German, Spanish, Russian, Chinese), M MB of them (5 by
default). Each side encodes it R times (3 by default) in one process after loading its vocabulary,
taskset to core 0; the figure is the best run's encode time (kgpt: `kgpt tokenizer encode --timing`;
npm: its encode_ordinary timed with process.hrtime around the call), so loading, reading and
printing stay out of both. Prints a Markdown table with both MB/s and their ratio, and the token
counts, which must agree. Then `kgpt prepare` of C copies of the text (16 by default, so that
starting the ranks and loading the ranks file weigh little), under `mpiexec -n 1` and `-n N`.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENCODINGS = ["gpt2", "r50k_base", "p50k_base", "cl100k_base", "o200k_base"]
NODE_TIMER = r"""
const fs = require("fs"), path = require("path");
const [modules, name, file, repeats] = process.argv.slice(2);
const { get_encoding } = require(path.join(modules, "tiktoken"));
const text = fs.readFileSync(file, "utf8");
const enc = get_encoding(name);
enc.encode_ordinary("warm up");
let best = Infinity, count = 0;
for (let r = 0; r < Number(repeats); ++r) {
  const t0 = process.hrtime.bigint();
  count = enc.encode_ordinary(text).length;
  best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
}
console.log(best, count);
"""


def text_file(directory, megabytes):
    english = subprocess.run(["bash", os.path.join(ROOT, "scripts", "english_fortunes.sh")], check=True,
                             capture_output=True, text=True).stdout.split()
    others = []
    for language in ("de", "es", "ru"):
        others += sorted(p for p in glob.glob(f"/usr/share/games/fortunes/{language}/*")
                         if os.path.isfile(p) and not os.path.islink(p) and not p.endswith(".dat"))
    others += [f"/usr/share/games/fortunes/{n}" for n in ("chinese", "song100", "tang300")]
    limit = int(megabytes * 1e6)
    data = b""
    for path in english + others:
        if len(data) >= limit:
            break
        data += open(path, "rb").read()
    data = data[:data.rindex(b"\n", 0, limit) + 1] if len(data) > limit else data
    path = os.path.join(directory, "fortunes.txt")
    open(path, "wb").write(data)
    return path, len(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kgpt")
    parser.add_argument("npm_prefix")
    parser.add_argument("--megabytes", type=float, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--prepare-copies", type=int, default=16)
    args = parser.parse_args()
    modules = os.path.abspath(os.path.join(args.npm_prefix, "node_modules"))
    with tempfile.TemporaryDirectory() as work:
        subprocess.run([os.path.join(ROOT, "scripts", "tiktoken_ranks.py"), modules, work], check=True,
                       capture_output=True)
        text, size = text_file(work, args.megabytes)
        timer = os.path.join(work, "timer.cjs")
        open(timer, "w").write(NODE_TIMER)
        print(f"{size:,} bytes of fortunes, best of {args.repeats}, one core (taskset -c 0)\n")
        print("| encoding | kgpt MB/s | npm tiktoken MB/s | kgpt / tiktoken | tokens |")
        print("|---|---|---|---|---|")
        for name in ENCODINGS:
            best, count = float("inf"), None
            for _ in range(args.repeats):
                result = subprocess.run(["taskset", "-c", "0", args.kgpt, "tokenizer", "encode", "--tokenizer", "tiktoken",
                                         "--vocab", os.path.join(work, name + ".tiktoken"), "--input", text, "--timing"],
                                        check=True, capture_output=True, text=True)
                m = re.search(r"into ([\d,]+) tokens in ([\d.]+) s", result.stderr)
                best, count = min(best, float(m.group(2))), int(m.group(1).replace(",", ""))
            node = subprocess.run(["taskset", "-c", "0", "node", timer, modules, name, text, str(args.repeats)],
                                  check=True, capture_output=True, text=True).stdout.split()
            node_seconds, node_count = float(node[0]), int(node[1])
            ours, theirs = size / 1e6 / best, size / 1e6 / node_seconds
            agree = f"{count:,}" if count == node_count else f"{count:,} (tiktoken {node_count:,}: DIFFERENT)"
            print(f"| {name} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f}x | {agree} |")

        copies = [text] * args.prepare_copies
        print(f"\nkgpt prepare --tokenizer tiktoken --vocab gpt2.tiktoken --doc-delimiter % of {args.prepare_copies} copies "
              f"({args.prepare_copies * size:,} bytes) under mpiexec, wall seconds, best of {args.repeats}:\n")
        print("| MPI ranks | seconds | MB/s | speed-up |")
        print("|---|---|---|---|")
        base = None
        for ranks in sorted({1, args.ranks}):
            best = float("inf")
            for _ in range(args.repeats):
                command = [args.kgpt, "prepare", "--tokenizer", "tiktoken", "--vocab", os.path.join(work, "gpt2.tiktoken"),
                           "--input", *copies, "--out", os.path.join(work, "shards"), "--doc-delimiter", "%", "--force",
                           "--quiet"]
                command = ["mpiexec", "-n", str(ranks), "--bind-to", "core"] + command
                start = time.perf_counter()
                subprocess.run(command, check=True, capture_output=True)
                best = min(best, time.perf_counter() - start)
            base = base or best
            print(f"| {ranks} | {best:.2f} | {args.prepare_copies * size / 1e6 / best:.2f} | {base / best:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
