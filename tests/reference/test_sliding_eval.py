#!/usr/bin/python3
"""Sliding-window evaluation (train.eval_stride) against an independent PyTorch evaluation of the
same checkpoint, with the real kgpt.

usage: test_sliding_eval.py KGPT MPIEXEC SOURCE_DIR WORKDIR

A small golf model trains 40 steps on hand-written shards; `kgpt eval` then scores its checkpoint
back to back and with strides. The reference (reference_models.py's Golf in float64, the weights
read from the checkpoint with h5py) builds its own windows from the definition: windows of seq_len
tokens start every stride tokens, the last one ends where the split does, and each scores only the
positions no earlier window scored. Checks:
- kgpt's val_loss equals the reference's mean loss over every val token to 2e-5 relative (an fp32
  model against float64), for strides 1, 5 and 16 of seq_len 16 and back to back;
- stride = seq_len gives the back-to-back figure, and a stride of 5 a lower loss than back to back
  (more context per token);
- every evaluation scores each token once, so val_bpb / val_loss is the same for every stride;
- 1 and 3 ranks print the same figures;
- a stride above seq_len is refused with exit code 2, naming train.eval_stride.
"""

import math
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_models import FAMILIES  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from golf_runs import golf_settings, text_tokens  # noqa: E402
from shards import write_shard  # noqa: E402

KGPT, MPIEXEC, SOURCE_DIR, WORKDIR = sys.argv[1:5]
ROOT = os.path.join(WORKDIR, "sliding_eval")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
ENV.pop("SLURM_NTASKS", None)
SEQ, VAL_TOKENS = 16, 320
torch.set_default_dtype(torch.float64)
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def run(args, expect=0):
    r = subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    if r.returncode != expect:
        print(r.stdout, r.stderr)
        sys.exit(f"{' '.join(args[:4])}: exit code {r.returncode}, want {expect}")
    return r


def kgpt_eval(checkpoint, stride, ranks=1):
    args = [KGPT, "eval", checkpoint, "--set", f"train.eval_stride={stride}"]
    if ranks > 1:
        args = [MPIEXEC, "--oversubscribe", "-n", str(ranks)] + args
    line = run(args).stdout
    found = re.search(r"val_loss:([0-9.]+) val_bpb:([0-9.]+) val_tokens:(\d+)", line)
    if not found:
        sys.exit(f"kgpt eval printed no figures: {line}")
    return float(found.group(1)), float(found.group(2)), int(found.group(3))


def reference_loss(model, tokens, stride):
    """The mean loss over every target position, each scored once by the windows the definition
    gives (stride 0: back-to-back windows)."""
    targets = len(tokens) - 1
    step = stride if stride > 0 else SEQ
    scored_end, total, count, start = 0, 0.0, 0, 0
    x = torch.tensor(tokens, dtype=torch.long)
    while scored_end < targets:
        at = min(start, targets - SEQ)
        with torch.no_grad():
            logits = model.logits(x[at:at + SEQ][None])[0]
            losses = F.cross_entropy(logits, x[at + 1:at + SEQ + 1], reduction="none")
        first = scored_end - at
        total += float(losses[first:].sum())
        count += SEQ - first
        scored_end = at + SEQ
        start += step
    if count != targets:
        sys.exit(f"the reference scored {count} positions of {targets}")
    return total / count


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    write_shard(os.path.join(ROOT, "train_000000.bin"), text_tokens(1, 20000))
    val = text_tokens(2, VAL_TOKENS + 1)
    write_shard(os.path.join(ROOT, "val_000000.bin"), val)
    run_dir = os.path.join(ROOT, "run")
    sets = ["data.train_files=train_*.bin", "data.val_files=val_*.bin", f"train.seq_len={SEQ}",
            "train.global_batch_tokens=256", "train.accum_total=1", "train.iterations=40", "train.eval_every=0",
            "train.warmdown_iters=0", f"train.val_tokens={VAL_TOKENS}", "model.n_layer=2", "model.d_model=32",
            "model.n_head=2", "model.n_kv_head=1"]
    args = [KGPT, "train", os.path.join(SOURCE_DIR, "inputs", "tiny_cpu.yaml"), "--run-dir", run_dir]
    for s in sets:
        args += ["--set", s]
    run(args)
    checkpoint = os.path.join(run_dir, "checkpoints", sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1])

    with h5py.File(checkpoint, "r") as f:
        deck = f["metadata/deck"][()]
        deck = yaml.safe_load(deck.decode() if isinstance(deck, bytes) else deck)
        params = {name: torch.tensor(np.array(f["params"][name]), dtype=torch.float64) for name in f["params"]}
    settings = golf_settings(deck["model"])
    model = FAMILIES["golf"](params, settings)
    tokens = val[:VAL_TOKENS + 1]

    figures = {}
    for stride in (0, 1, 5, SEQ):
        loss, bpb, count = kgpt_eval(checkpoint, stride)
        expected = reference_loss(model, tokens, stride)
        figures[stride] = (loss, bpb)
        check(count == VAL_TOKENS, f"stride {stride}: val_tokens {count}, want {VAL_TOKENS}")
        check(abs(loss - expected) <= 2e-5 * expected,
              f"stride {stride}: kgpt val_loss {loss}, the PyTorch reference {expected:.6f}")
        print(f"stride {stride}: kgpt val_loss {loss:.6f} val_bpb {bpb:.6f}, reference {expected:.6f}")
    check(abs(figures[SEQ][0] - figures[0][0]) <= 2e-6,
          f"stride = seq_len: {figures[SEQ][0]}, back to back {figures[0][0]}")
    check(figures[5][0] < figures[0][0], f"stride 5: {figures[5][0]} is not below back to back {figures[0][0]}")
    ratios = [bpb / loss for loss, bpb in figures.values()]
    check(max(ratios) - min(ratios) <= 1e-5 * max(ratios), f"val_bpb / val_loss differs between strides: {ratios}")
    for ranks in (3,):
        loss, bpb, _ = kgpt_eval(checkpoint, 5, ranks)
        check(abs(loss - figures[5][0]) <= 2e-6 and abs(bpb - figures[5][1]) <= 2e-6,
              f"{ranks} ranks, stride 5: {loss} {bpb}, one rank {figures[5]}")
    r = run([KGPT, "eval", checkpoint, "--set", f"train.eval_stride={SEQ + 1}"], expect=2)
    check("train.eval_stride" in r.stderr and "train.seq_len" in r.stderr,
          f"a stride above seq_len: stderr does not name train.eval_stride and train.seq_len: {r.stderr}")
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("sliding-window evaluation: all checks passed")


main()
