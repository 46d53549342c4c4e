#!/usr/bin/python3
"""Whether two kgpt binaries train to the same numbers, bit for bit: a refactoring's check.

usage: same_numbers.py BEFORE_KGPT AFTER_KGPT [--steps N] [--only NAME] [--keep DIR]

Runs each case below (every family, golf's record options one by one and together, fp32 and bf16)
with both binaries from the same deck and data for N steps (6 by default, evaluating at N/2 and N),
exports each final checkpoint (int6 and int5 rows above 4,096 elements, zstd), and compares:
  - the history's train loss and gradient norm and the val loss and bpb, bit for bit;
  - every dataset of the final checkpoint (weights, optimizer state, averages; not its metadata or
    training seconds), bit for bit;
  - the artifact's tensors as `kgpt inspect` lists them: each one's storage and norm.
Prints one line per case and exits 1 if any case differs, naming what moved. Reads the byte-level
data of inputs/tiny_cpu.yaml (scripts/setup.sh makes it).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "inputs", "tiny_cpu.yaml")
LLAMA = os.path.join(ROOT, "inputs", "llama_tiny_cpu.yaml")
GOLF_RECORD = ["model.smear_gate=true", "model.bigram_buckets=64", "model.bigram_dim=32",
               "model.parallel_residual_start=2", "model.recur_start=1", "model.recur_count=2",
               "train.ema_decay=0.9", "train.qat_start_lr=1.5", "train.grad_clip_norm=0.3",
               "optim.matrix_weight_decay=0.04", "optim.scalar_weight_decay=0.04"]
CASES = {
    "golf": (TINY, []),
    "golf-adamw": (TINY, ["optim.matrix_optimizer=adamw"]),
    "golf-bf16": (TINY, ["train.precision=bf16"]),
    "golf-smear": (TINY, ["model.smear_gate=true"]),
    "golf-bigram": (TINY, ["model.bigram_buckets=64", "model.bigram_dim=32"]),
    "golf-recur": (TINY, ["model.recur_start=1", "model.recur_count=2"]),
    "golf-parallel": (TINY, ["model.parallel_residual_start=2"]),
    "golf-ema": (TINY, ["train.ema_decay=0.9", "train.eval_weights=ema"]),
    "golf-swa": (TINY, ["train.swa_every=1", "train.swa_start_lr=1.5", "train.eval_weights=swa"]),
    "golf-qat": (TINY, ["train.qat_start_lr=1.5"]),
    "golf-untied": (TINY, ["model.tie_embeddings=false"]),
    "golf-record": (TINY, GOLF_RECORD),
    "golf-record-bf16": (TINY, GOLF_RECORD + ["train.precision=bf16"]),
    "gpt2": (TINY, ["model.family=gpt2", "model.n_kv_head=4"]),
    "gpt2-untied-muon": (TINY, ["model.family=gpt2", "model.n_kv_head=4", "model.tie_embeddings=false",
                               "optim.matrix_optimizer=muon", "train.qat_start_lr=1.5"]),
    "llama": (LLAMA, []),
    "llama-bf16-ema": (LLAMA, ["train.precision=bf16", "train.ema_decay=0.9", "train.eval_weights=ema"]),
}


def run(kgpt, args, cwd):
    done = subprocess.run([kgpt] + args, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join([kgpt] + args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout


def train_and_export(kgpt, deck, overrides, steps, where):
    data = os.path.join(ROOT, "data", "tiny_cpu")
    sets = [f"data.train_files={data}/fortunes_train_*.bin", f"data.val_files={data}/fortunes_val_*.bin",
            f"train.iterations={steps}", f"train.eval_every={max(steps // 2, 1)}", "train.val_tokens=4096",
            "train.log_every=1", "export.attention_bits=6", "export.mlp_bits=5", "export.compression=zstd", "export.keep_float_max=4096"] + overrides
    args = ["train", deck, "--run-dir", "run"]
    for s in sets:
        args += ["--set", s]
    run(kgpt, args, where)
    checkpoint = os.path.join(where, "run", "checkpoints", f"ckpt_{steps:08d}.h5")
    run(kgpt, ["export", checkpoint, "--out", os.path.join(where, "model.kgpt")], where)
    listing = run(kgpt, ["inspect", os.path.join(where, "model.kgpt")], where)
    return os.path.join(where, "run", "history.h5"), checkpoint, listing


def datasets(path):
    found = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.startswith("metadata") and name != "state/training_seconds":
                found[name] = obj[()]
        f.visititems(visit)
    return found


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "fc":
        return a.shape == b.shape and a.tobytes() == b.tobytes()
    return a.shape == b.shape and bool(np.all(a == b))


def compare(before, after):
    moved = []
    hb, cb, lb = before
    ha, ca, la = after
    columns = ["train/loss", "train/grad_norm", "val/loss", "val/bpb"]
    b, a = datasets(hb), datasets(ha)
    moved += [c for c in columns if not same(b[c], a[c])]
    b, a = datasets(cb), datasets(ca)
    moved += [f"checkpoint {k}" for k in sorted(set(b) | set(a)) if k not in a or k not in b or not same(b[k], a[k])]
    lines_b = [l for l in lb.splitlines() if l.startswith("    ")]
    lines_a = [l for l in la.splitlines() if l.startswith("    ")]
    moved += [f"artifact {x.split()[0]}: {x.strip()} -> {y.strip()}" for x, y in zip(lines_b, lines_a) if x != y]
    if len(lines_b) != len(lines_a):
        moved.append(f"artifact: {len(lines_b)} tensors -> {len(lines_a)}")
    return moved


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--only", action="append")
    parser.add_argument("--keep")
    options = parser.parse_args()
    top = options.keep or tempfile.mkdtemp(prefix="kgpt_same_numbers_")
    failed = 0
    for name, (deck, overrides) in CASES.items():
        if options.only and name not in options.only:
            continue
        results = []
        for side, kgpt in (("before", options.before), ("after", options.after)):
            where = os.path.join(top, name, side)
            os.makedirs(where, exist_ok=True)
            results.append(train_and_export(os.path.abspath(kgpt), deck, overrides, options.steps, where))
        moved = compare(*results)
        failed += bool(moved)
        print(f"{name}: " + ("same" if not moved else "MOVED: " + "; ".join(moved)), flush=True)
    print(f"{failed} of the cases moved")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
