#!/usr/bin/python3
"""kgpt golf-check against its definitions, recomputed here from the run files, Debian's
python3-brotli and scipy.

usage: test_golf_check.py KGPT SOURCE_DIR WORKDIR

Three seeds of a small golf deck train 6 steps each and are exported (one evaluated by kgpt eval,
which records its round trip). Checks:
- code: the files of app/, src/, cmake/ and the two top CMake files, each as path, size and bytes in
  path order, compressed by python3-brotli at quality 11 (window 2^24): the same raw and compressed
  bytes; the artifact's bytes are the file's, the total their sum;
- train_s is history.h5's step_ms summed (h5py); val_bpb and val_tokens equal kgpt eval's of the
  artifact, "same" beside the recorded figure, "none" where none was recorded;
- the seeds' mean and sample standard deviation equal numpy's, t and the one-sided p-value
  scipy.stats.ttest_1samp's (alternative "less") against baselines above and below the mean;
- a source larger than the limit: "exceeds" and exit code 1;
- bad inputs end with exit code 2 naming the thing: a missing run directory, a run without
  artifact.yaml, an artifact.yaml whose artifact was removed, a baseline that is no number, a --code
  folder that is no checkout.
"""

import os
import re
import shutil
import sys

import brotli
import h5py
import numpy as np
from scipy import stats

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from golf_runs import SMALL_GOLF_SECTIONS, check, failures, fresh_text_shards, runner  # noqa: E402

KGPT, SOURCE_DIR, WORKDIR = sys.argv[1:4]
ROOT = os.path.join(WORKDIR, "golf_check")
run = runner(ROOT, dict(os.environ, OPENBLAS_NUM_THREADS="1"))


def code_count(root):
    files = []
    for folder in ("app", "src", "cmake"):
        for base, _, names in os.walk(os.path.join(root, folder)):
            files += [os.path.relpath(os.path.join(base, n), root) for n in names]
    files += [f for f in ("CMakeLists.txt", "CMakePresets.json") if os.path.isfile(os.path.join(root, f))]
    archive, raw = b"", 0
    for name in sorted(files):
        data = open(os.path.join(root, name), "rb").read()
        raw += len(data)
        archive += name.encode() + b"\n" + str(len(data)).encode() + b"\n" + data
    return len(files), raw, len(brotli.compress(archive, quality=11, lgwin=24))


def fields(line):
    """key:value items of a line, and its bare words under "words"."""
    items = dict(item.split(":", 1) for item in line.split() if ":" in item)
    items["words"] = {item for item in line.split() if ":" not in item}
    return items


def main():
    fresh_text_shards(ROOT)
    deck = os.path.join(ROOT, "deck.yaml")
    with open(deck, "w") as f:
        f.write(SMALL_GOLF_SECTIONS + "train:\n  seq_len: 16\n  global_batch_tokens: 64\n  accum_total: 1\n"
                "  iterations: 6\n  eval_every: 0\n  val_tokens: 256\n  log_every: 1\n"
                "export:\n  compression: brotli\n")
    runs = []
    for seed in (1, 2, 3):
        run_dir = os.path.join(ROOT, f"seed{seed}")
        run([KGPT, "train", deck, "--run-dir", run_dir, "--set", f"run.seed={seed}"])
        run([KGPT, "export", os.path.join(run_dir, "checkpoints", "ckpt_00000006.h5"), "--out",
             os.path.join(run_dir, "model.kgptz")])
        runs.append(run_dir)
    evaluated = run([KGPT, "eval", os.path.join(runs[0], "model.kgptz")]).stdout
    kgpt_eval = [fields(line) for line in evaluated.splitlines() if line.startswith("artifact:")][0]

    bpbs, baselines = [], [None]
    while baselines:
        baseline = baselines.pop(0)
        args = [KGPT, "golf-check", *runs] + (["--baseline", baseline] if baseline else [])
        out = run(args).stdout
        lines = out.splitlines()
        code = fields(next(line for line in lines if line.startswith("code:")))
        files, raw, compressed = code_count(SOURCE_DIR)
        check(int(code["files"]) == files and int(code["raw_bytes"]) == raw,
              f"code: {code} against {files} files of {raw} bytes")
        check(int(code["brotli_bytes"]) == compressed and int(code["counted"]) == compressed,
              f"code: {code} against {compressed} bytes after python3-brotli")
        bpbs = []
        for run_dir in runs:
            mine = [fields(line) for line in lines if line.startswith(f"run:{run_dir} ")]
            check(len(mine) == 3, f"{run_dir}: {len(mine)} lines, want 3: {out}")
            if len(mine) != 3:
                continue
            size, train, scored = mine
            artifact = os.path.join(run_dir, "model.kgptz")
            check(size["artifact"] == artifact and int(size["artifact_bytes"]) == os.path.getsize(artifact),
                  f"{run_dir}: {size}")
            check(int(size["total_bytes"]) == int(size["artifact_bytes"]) + compressed and "fits" in size["words"] and
                  size["limit"] == "16000000", f"{run_dir}: {size}")
            with h5py.File(os.path.join(run_dir, "history.h5"), "r") as h:
                seconds = float(np.sum(h["train/step_ms"][:])) / 1000
            check(abs(float(train["train_s"]) - seconds) <= 0.051 and train["steps"] == "6" and "within" in train["words"],
                  f"{run_dir}: {train} against {seconds:.3f} s summed")
            bpbs.append(float(scored["val_bpb"]))
            check(scored["val_tokens"] == "256" and "within" in scored["words"], f"{run_dir}: {scored}")
            if run_dir == runs[0]:
                check(scored["val_bpb"] == kgpt_eval["val_bpb"] and scored["val_loss"] == kgpt_eval["val_loss"],
                      f"golf-check's {scored} against kgpt eval's {kgpt_eval}")
                check(scored.get("recorded_val_bpb") == kgpt_eval["val_bpb"] and " same" in out,
                      f"{run_dir}: recorded {scored.get('recorded_val_bpb')}")
            else:
                check(scored.get("recorded_val_bpb") == "none", f"{run_dir}: recorded {scored.get('recorded_val_bpb')}")
        check(len(set(bpbs)) == 3, f"three seeds gave val_bpb {bpbs}")
        seeds = fields(next((line for line in lines if line.startswith("seeds:")), "seeds:"))
        check(abs(float(seeds.get("mean_val_bpb", "nan")) - np.mean(bpbs)) <= 1e-6 and
              abs(float(seeds.get("std_val_bpb", "nan")) - np.std(bpbs, ddof=1)) <= 1e-6,
              f"seeds: {seeds} against mean {np.mean(bpbs)}, std {np.std(bpbs, ddof=1)}")
        if baseline:
            want = stats.ttest_1samp(bpbs, float(baseline), alternative="less")
            check(abs(float(seeds["t"]) + want.statistic) <= 1e-3 * max(1, abs(want.statistic)),
                  f"t {seeds['t']} against scipy's {-want.statistic} (baseline {baseline})")
            p = float(seeds["p_value"])
            check(abs(p - want.pvalue) <= 2e-3 * want.pvalue + 1e-300,
                  f"p {p} against scipy's {want.pvalue} (baseline {baseline})")
            print(f"baseline {baseline}: t {seeds['t']} p {p} (scipy {want.pvalue:.4g})")
        check(out.strip().endswith("every one within the size and time limits"), f"last line: {lines[-1]}")
        if baseline is None and len(bpbs) == 3:  # then above the mean (a small p) and below it (p > 0.5)
            spread = np.std(bpbs, ddof=1)
            baselines = [f"{np.mean(bpbs) + 2 * spread:.6f}", f"{np.mean(bpbs) - 0.5 * spread:.6f}"]

    # A source past the limit: the run exceeds it.
    big = os.path.join(ROOT, "big_source")
    os.makedirs(os.path.join(big, "src"))
    open(os.path.join(big, "CMakeLists.txt"), "w").write("project(big)\n")
    open(os.path.join(big, "src", "noise.bin"), "wb").write(np.random.default_rng(7).bytes(16_100_000))
    over = run([KGPT, "golf-check", runs[0], "--code", big], expect=1).stdout
    check(" exceeds" in over and "a limit exceeded (exit code 1)" in over, f"over the limit: {over[-400:]}")

    # Bad inputs: exit code 2, naming the thing.
    bare = os.path.join(ROOT, "bare")
    os.makedirs(bare)
    gone = os.path.join(ROOT, "gone")
    shutil.copytree(runs[1], gone)
    with open(os.path.join(gone, "artifact.yaml")) as f:
        text = f.read().replace(os.path.join(runs[1], "model.kgptz"), os.path.join(gone, "model.kgptz"))
    open(os.path.join(gone, "artifact.yaml"), "w").write(text)
    os.remove(os.path.join(gone, "model.kgptz"))
    for args, named in [([os.path.join(ROOT, "nowhere")], "nowhere: no such run directory"),
                        ([bare], "bare: no artifact.yaml"),
                        ([gone], "gone/model.kgptz is missing"),
                        ([runs[0], "--baseline", "low"], "--baseline"),
                        ([runs[0], "--code", bare], "not a kgpt checkout")]:
        r = run([KGPT, "golf-check", *args], expect=2)
        check(named in r.stderr, f"golf-check {args}: {r.stderr[-300:]}")
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("golf-check: every figure as recomputed here")


if __name__ == "__main__":
    main()
