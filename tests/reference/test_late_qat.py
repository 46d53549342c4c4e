#!/usr/bin/python3
"""Late quantization-aware training (train.qat_start_lr) against an independent PyTorch computation
of the same definition, with the real kgpt.

usage: test_late_qat.py KGPT SOURCE_DIR WORKDIR

A small golf model starts from weights this script writes (model.init_from). Checks:
- with QAT from the first step (attention 5 bits, MLP 4), the first step's train loss and gradient
  norm (history.h5) equal reference_models.py's Golf (float64) on the start weights with the
  blocks' matrices rounded per row in numpy (s = max|w| / R in float32, clamp(rint(w / s), -R, R) s),
  the same micro-batch (the first 257 tokens of the stream), to 1e-5 and 1e-4; without QAT they
  equal the unrounded model's, and the two losses differ by more than ten times the tolerance;
- the optimizer updates the live weights: with AdamW at a learning rate of 1e-6 the matrices after
  the step are within 2e-6 of the start, not of their rounded values;
- with a warmdown over the last 8 of 12 steps and qat_start_lr 0.5, QAT starts at step 10, the first
  whose multiplier (12 - 9) / 8 is below 0.5, and the log says so; a run resumed from step 9 writes the
  step-12 checkpoint bit for bit;
- kgpt check's memory plan lists the copy of the weights QAT keeps.
"""

import os
import re
import shutil
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_models import FAMILIES  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from golf_runs import check, failures, fresh_text_shards, golf_settings, runner, start_weights, write_safetensors  # noqa: E402

KGPT, SOURCE_DIR, WORKDIR = sys.argv[1:4]
ROOT = os.path.join(WORKDIR, "late_qat")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")
SEQ, BATCH = 16, 256
BITS = {"attn": 5, "mlp": 4}
run = runner(ROOT, ENV)


def rounded(name, w):
    """The block matrices rounded per row at their bits; other tensors as they are."""
    kind = "mlp" if ".mlp." in name else "attn" if ".attn." in name and name.endswith(".weight") else None
    if kind is None or w.ndim != 2:
        return w
    limit = np.float32((1 << (BITS[kind] - 1)) - 1)
    out = w.copy()
    for r, row in enumerate(w):
        scale = np.float32(np.abs(row).max()) / limit
        if scale > 0:
            out[r] = np.clip(np.rint(row / scale), -limit, limit) * scale
    return out


def reference(weights, tokens, settings):
    """Loss and global gradient norm of the first micro-batch, in float64."""
    params = {k: torch.tensor(v, dtype=torch.float64) for k, v in weights.items()}
    model = FAMILIES["golf"](params, settings)
    x = torch.tensor(tokens[:BATCH], dtype=torch.long).view(-1, SEQ)
    y = torch.tensor(tokens[1:BATCH + 1], dtype=torch.long).view(-1, SEQ)
    logits = model.logits(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
    return float(loss), float(norm)


def first_row(run_dir):
    with h5py.File(os.path.join(run_dir, "history.h5"), "r") as f:
        train = f["train"]
        return float(train["loss"][0]), float(train["grad_norm"][0])


def main():
    tokens = fresh_text_shards(ROOT)
    deck = os.path.join(SOURCE_DIR, "inputs", "tiny_cpu.yaml")
    base = ["data.train_files=train_*.bin", "data.val_files=val_*.bin", f"train.seq_len={SEQ}",
            f"train.global_batch_tokens={BATCH}", "train.accum_total=1", "train.eval_every=0", "train.val_tokens=320",
            "model.n_layer=2", "model.d_model=32", "model.n_head=2", "model.n_kv_head=1", "train.log_every=1",
            f"export.attention_bits={BITS['attn']}", f"export.mlp_bits={BITS['mlp']}"]

    def train(run_dir, extra, *flags):
        args = [KGPT, "train", deck, "--run-dir", os.path.join(ROOT, run_dir), *flags]
        for s in base + extra:
            args += ["--set", s]
        return run(args)

    train("plain", ["train.iterations=1", "train.warmdown_iters=0"])
    with h5py.File(os.path.join(ROOT, "plain", "checkpoints", "ckpt_00000001.h5"), "r") as f:
        shapes = {name: f["params"][name].shape for name in f["params"]}
        text = f["metadata/deck"][()]
    settings = golf_settings(yaml.safe_load(text.decode() if isinstance(text, bytes) else text)["model"])
    start = start_weights(shapes, 11, 0.08)
    write_safetensors(os.path.join(ROOT, "start.safetensors"), start)

    # The first step with and without QAT, against PyTorch.
    one = ["model.init_from=start.safetensors", "train.iterations=1", "train.warmdown_iters=0",
           "optim.matrix_optimizer=adamw", "optim.matrix_lr=1e-6"]
    log = train("qat", one + ["train.qat_start_lr=1.5"]).stdout
    train("live", one)
    check("late_qat: from step:1 " in log, f"the log does not say QAT starts at step 1: {log}")
    torch.set_default_dtype(torch.float64)
    expected_q = reference({k: rounded(k, v) for k, v in start.items()}, tokens, settings)
    expected_live = reference(start, tokens, settings)
    got_q, got_live = first_row(os.path.join(ROOT, "qat")), first_row(os.path.join(ROOT, "live"))
    print(f"QAT: loss {got_q[0]:.6f} (reference {expected_q[0]:.6f}), grad norm {got_q[1]:.6f} ({expected_q[1]:.6f}); "
          f"live: loss {got_live[0]:.6f} ({expected_live[0]:.6f}), grad norm {got_live[1]:.6f} ({expected_live[1]:.6f})")
    for label, got, expected in (("QAT", got_q, expected_q), ("live", got_live, expected_live)):
        check(abs(got[0] - expected[0]) <= 1e-5 * expected[0], f"{label}: loss {got[0]}, the reference {expected[0]}")
        check(abs(got[1] - expected[1]) <= 1e-4 * expected[1], f"{label}: grad norm {got[1]}, the reference {expected[1]}")
    check(abs(expected_q[0] - expected_live[0]) > 1e-4 * expected_live[0],
          f"rounding changes the reference loss by too little to tell: {expected_q[0]} {expected_live[0]}")

    # The live weights take the update: after one AdamW step of 1e-6 they are next to the start.
    with h5py.File(os.path.join(ROOT, "qat", "checkpoints", "ckpt_00000001.h5"), "r") as f:
        after = {name: np.array(f["params"][name]) for name in f["params"]}
    moved = max(float(np.abs(after[k] - start[k]).max()) for k in start if ".weight" in k and k.startswith("blocks"))
    off_grid = max(float(np.abs(rounded(k, start[k]) - start[k]).max()) for k in start if k.startswith("blocks"))
    check(moved <= 2e-6 < off_grid, f"the matrices moved {moved:.3g} from the start weights (rounding moves {off_grid:.3g})")

    # A late start, and resuming across it.
    late = ["model.init_from=start.safetensors", "train.iterations=12", "train.warmdown_iters=8",
            "train.qat_start_lr=0.5", "run.checkpoint_every=1", "run.checkpoint_keep_last=20"]
    log = train("late", late).stdout
    found = re.search(r"late_qat: from step:(\d+) lr_multiplier:([0-9.]+)", log)
    check(found is not None and found.group(1) == "10" and abs(float(found.group(2)) - 3 / 8) < 1e-9,
          f"QAT from {found.group(0) if found else 'no step'}, the definition says step 10 at 0.375")
    shutil.copytree(os.path.join(ROOT, "late"), os.path.join(ROOT, "resumed"))
    for s in (10, 11, 12):
        os.remove(os.path.join(ROOT, "resumed", "checkpoints", f"ckpt_{s:08d}.h5"))
    train("resumed", late, "--resume")
    with h5py.File(os.path.join(ROOT, "late", "checkpoints", "ckpt_00000012.h5"), "r") as a, \
            h5py.File(os.path.join(ROOT, "resumed", "checkpoints", "ckpt_00000012.h5"), "r") as b:
        differing = [n for n in a["params"] if not np.array_equal(np.array(a["params"][n]), np.array(b["params"][n]))]
        differing += [f"optim/{g}/{n}" for g in a["optim"] for n in a["optim"][g]
                      if not np.array_equal(np.array(a["optim"][g][n]), np.array(b["optim"][g][n]))]
    check(not differing, f"resumed at step 9, the step-12 checkpoint differs in {differing[:5]}")

    plan = run([KGPT, "check", os.path.join(ROOT, "late", "deck.yaml"), "--no-data"]).stderr
    check(re.search(r"late QAT copy", plan) is not None, f"kgpt check's memory plan: {plan}")
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("late QAT: all checks passed")


main()
