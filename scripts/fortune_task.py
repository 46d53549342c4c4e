#!/usr/bin/python3
"""A multiple-choice task in HellaSwag's format from fortune files: which of four lines follows a
fortune's first line? For `kgpt eval --task` and data.task_files on models trained on fortunes.

    scripts/fortune_task.py FILE... --out TASK.jsonl [--examples N] [--val-fraction F] [--seed S]

Documents are read as `kgpt prepare --doc-delimiter %` reads them (each file starts one, a line
"%" ends one, no empty ones), and only the documents that prepare puts in the val split with the
same --val-fraction (document i when ceil((i + 1) F) > ceil(i F)) become examples, so a model
trained on the train split has not seen them. An example's context is a fortune's first line, its
right ending the second line, the three others the second lines of other val fortunes, in a
random order; fortunes whose first two lines are not both 20 to 120 characters are skipped.
"""
import argparse
import json
import math
import random
import sys


def documents(paths):
    for path in paths:
        lines = []
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.rstrip("\r") == "%":
                    if lines:
                        yield lines
                    lines = []
                else:
                    lines.append(line)
        if lines:
            yield lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--val-fraction", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    f = args.val_fraction
    candidates = []
    for i, lines in enumerate(documents(args.files)):
        if math.ceil((i + 1) * f) <= math.ceil(i * f):
            continue  # a train document
        text = [line.strip() for line in lines if line.strip()]
        if len(text) >= 2 and all(20 <= len(line) <= 120 for line in text[:2]):
            candidates.append((text[0], text[1]))
    if len(candidates) < 4:
        sys.exit(f"only {len(candidates)} val fortunes fit; give more files or a larger --val-fraction")
    rng = random.Random(args.seed)
    rng.shuffle(candidates)
    rows = []
    for k, (context, right) in enumerate(candidates[: args.examples]):
        others = [c[1] for j, c in enumerate(candidates) if j != k]
        endings = [right] + rng.sample(others, 3)
        rng.shuffle(endings)
        rows.append({"ctx": context, "endings": endings, "label": endings.index(right), "activity_label": "fortunes"})
    with open(args.out, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} examples from {len(candidates)} val fortunes to {args.out}")


if __name__ == "__main__":
    main()
