#!/usr/bin/python3
"""The record deck (inputs/golf_record_sp1024.yaml) trains, exports under parameter-golf's
16,000,000 bytes and evaluates, on the tiny deck's data.

usage: test_record_deck.py KGPT SOURCE_DIR WORKDIR

Its architecture as it is (11 blocks with 4 and 5 run twice, a 3x MLP, BigramHash 2816 x 112,
SmearGate, parallel residuals from block 7, value embeddings on layers 9 and 10, partial RoPE, LN scale and XSA on 11 layers: 27.0 M parameters)
and its export section (8/5/4 bits, brotli), at a CPU's scale: the byte tokenizer's data, fp32,
sequences of 128, 4 steps of 1,024 tokens. Checks:
- kgpt check predicts, from the shapes alone, an artifact that fits whatever the weights, and
  estimates the step on 8 H100s;
- training logs 13 layers' worth of FLOPs and ends with a checkpoint keeping the EMA;
- kgpt export of the EMA writes a file under 16,000,000 bytes, no larger than check's bound;
- kgpt eval of the artifact scores val_bpb within 2% of the checkpoint's EMA (4-bit rows of weights
  4 steps from their start cost 0.6% here; a broken round trip costs far more).
"""

import os
import re
import shutil
import subprocess
import sys

KGPT, SOURCE_DIR, WORKDIR = sys.argv[1:4]
ROOT = os.path.join(WORKDIR, "record_deck")
DATA = os.path.join(SOURCE_DIR, "data")
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def run(args, expect=0):
    r = subprocess.run(args, cwd=SOURCE_DIR, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "2")))
    if r.returncode != expect:
        print(r.stdout, r.stderr)
        sys.exit(f"{' '.join(args[:3])}: exit code {r.returncode}, want {expect}")
    return r


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    deck = os.path.join(SOURCE_DIR, "inputs", "golf_record_sp1024.yaml")
    check_run = run([KGPT, "check", deck, "--world-size", "8", "--no-data", "--plan-for", "cuda",
                     "--set", "parallel.device_memory_gib=79"])
    bound = re.search(r"at most ([0-9,]+) bytes after compression: fits parameter-golf's 16,000,000-byte limit "
                      r"whatever the weights", check_run.stderr)
    check(bound is not None, f"kgpt check: no artifact that fits whatever the weights: {check_run.stderr[-600:]}")
    bound = int(bound.group(1).replace(",", "")) if bound else 16000000
    check("estimated step on 8 x H100:" in check_run.stderr, "kgpt check: no step estimate")

    # The tiny deck's byte shards (scripts/setup.sh makes them): token ids below 257 fit the
    # deck's vocabulary of 1,024.
    shards = os.path.join(DATA, "tiny_cpu")
    sets = [f"data.train_files={shards}/fortunes_train_*.bin", f"data.val_files={shards}/fortunes_val_*.bin",
            "data.tokenizer=byte", "train.precision=fp32",
            "train.seq_len=128", "train.global_batch_tokens=1024", "train.accum_total=1", "train.iterations=4",
            "train.warmdown_iters=2", "train.eval_every=0", "train.val_tokens=4096", "train.max_wallclock_seconds=0",
            "train.log_every=1", "parallel.device_memory_gib=0"]
    run_dir = os.path.join(ROOT, "run")
    args = [KGPT, "train", deck, "--run-dir", run_dir]
    for s in sets:
        args += ["--set", s]
    train = run(args)
    check("layers:11" in train.stdout, f"the log names 11 blocks: {train.stdout[:400]}")
    val = re.search(r"step:4/4 val_loss:([0-9.]+) val_bpb:([0-9.]+) .*weights:ema", train.stdout)
    check(val is not None, f"no final evaluation of the EMA: {train.stdout[-600:]}")
    checkpoint = os.path.join(run_dir, "checkpoints", "ckpt_00000004.h5")
    artifact = os.path.join(ROOT, "record.kgpt")
    export = run([KGPT, "export", checkpoint, "--out", artifact, "--weights", "ema"])
    size = os.path.getsize(artifact)
    print(f"artifact: {size:,} bytes (check's bound {bound:,})")
    check(size < 16000000, f"the artifact is {size} bytes, not under 16,000,000")
    check(size <= bound, f"the artifact is {size} bytes, above kgpt check's bound {bound}")
    check("brotli" in export.stdout, f"kgpt export did not use the deck's brotli: {export.stdout[-400:]}")
    scored = run([KGPT, "eval", artifact])
    found = re.search(r"val_bpb:([0-9.]+)", scored.stdout)
    check(found is not None, f"kgpt eval of the artifact printed no val_bpb: {scored.stdout}")
    if found and val:
        print(f"val_bpb: EMA {float(val.group(2)):.4f}, artifact {float(found.group(1)):.4f}")
        check(abs(float(found.group(1)) - float(val.group(2))) < 0.02 * float(val.group(2)),
              f"the artifact scores {found.group(1)} against the EMA's {val.group(2)}")
    print(f"{'passed' if not failures else 'failed'}: {len(failures)} failures")
    sys.exit(1 if failures else 0)


main()
