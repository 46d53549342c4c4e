#!/usr/bin/python3
"""A checkpoint's tensors read with h5py and checked against the optimizer's rules, tensor by tensor.

usage: test_checkpoint_state.py KGPT MPIEXEC SOURCE_DIR WORKDIR

inputs/tiny_cpu.yaml (golf: Muon for the block matrices, Adam for the embedding and the scalars;
weight decay 0.1) trains 2 steps with a checkpoint after each, on 1 rank and on 2 ranks at
parallel.zero_stage: 1 (whose checkpoint gathers each rank's shard of the state). From the files
alone, in float64 here, with the learning rates history.h5 recorded for each step:
- every tensor keeps Adam's two moments or Muon's momentum by its group, never both (zeros elsewhere);
- Adam after step 1, from zero moments: m = (1 - b1) g and v = (1 - b2) g^2, so v = 5 m^2;
- Adam at step 2: g = (m2 - b1 m1) / (1 - b1) from the two files' m, and v2 = b2 v1 + (1 - b2) g^2;
  the parameters p2 = p1 (1 - lr wd) - lr (m2 / (1 - b1^2)) / (sqrt(v2 / (1 - b2^2)) + eps);
- Muon at step 2: g = buf2 - mu buf1 (mu = 0.8502, the warmup's value at step 2), u = g + mu buf2,
  and p2 = p1 (1 - lr wd) - lr max(1, rows/cols)^0.5 NewtonSchulz(u), Newton-Schulz written here in
  float64 (kgpt's runs in fp32: its products round near 1e-7 of the entries, so the update is held to
  1e-3 of the learning rate, where a wrong matrix, scale or transpose is off by the whole update,
  about 0.05 lr);
- the same on 2 ranks at zero stage 1 (tests/parallel/compare_ranks.py compares world sizes).
Tolerances are set from fp32 rounding: kgpt stores fp32, so m, v and p carry a relative error of
2^-24 = 6e-8 each; recovering g from m2 - b1 m1 loses up to 9x that (b1 m1 against 0.1 g): v2 and
the Adam parameters are held to 1e-5 relative (of v2, and of lr for p2).
"""

import math
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

KGPT, MPIEXEC, SOURCE_DIR, WORKDIR = sys.argv[1:5]
ROOT = os.path.join(WORKDIR, "checkpoint_state")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
ENV.pop("SLURM_NTASKS", None)
B1, B2, EPS, WD = 0.9, 0.95, 1e-8, 0.1
# 1 - b1 and 1 - b2 as kgpt's fp32 update forms them (0.099999964 and 0.050000012).
C1, C2 = float(np.float32(1) - np.float32(B1)), float(np.float32(1) - np.float32(B2))
MU = (1 - 1 / 500) * 0.85 + (1 / 500) * 0.95  # Muon's momentum at step 2 (index 1)
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def train(name, ranks, stage):
    run_dir = os.path.join(ROOT, name)
    args = ([MPIEXEC, "--oversubscribe", "-n", str(ranks)] if ranks > 1 else []) + [
        KGPT, "train", "inputs/tiny_cpu.yaml", "--run-dir", run_dir, "--set", "train.iterations=2",
        "--set", "run.checkpoint_every=1", "--set", "train.eval_every=0", "--set", "train.warmdown_iters=0",
        "--set", f"optim.weight_decay={WD}", "--set", f"parallel.zero_stage={stage}"]
    r = subprocess.run(args, cwd=SOURCE_DIR, env=ENV, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(f"{name}: kgpt train failed with exit code {r.returncode}")
    return run_dir


def read(path):
    with h5py.File(path, "r") as f:
        groups = {g: {n: f[g][n][()].astype(np.float64) for n in f[g].keys()}
                  for g in ("params", "optim/adam_m", "optim/adam_v", "optim/muon_momentum")}
    return groups


def newton_schulz(g, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g / (np.linalg.norm(g) + 1e-7)
    transposed = g.shape[0] > g.shape[1]
    if transposed:
        x = x.T
    for _ in range(steps):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x.T if transposed else x


def check_run(name, run_dir):
    """The rules above for one run's two checkpoints."""
    one, two = (read(os.path.join(run_dir, "checkpoints", f"ckpt_0000000{s}.h5")) for s in (1, 2))
    with h5py.File(os.path.join(run_dir, "history.h5"), "r") as f:
        lr = {g: f["train"][f"lr_{g}"][1] for g in ("matrix", "scalar", "embedding")}
    # Muon's tensors: the blocks' matrices (golf's); Adam's: the embedding and the scalars. After step
    # 2 each holds its own state and no other (after step 1 the blocks' inputs to the zero-initialised
    # output projections have no gradient yet).
    adam, muon = [], []
    for tensor in two["params"]:
        is_muon = re.fullmatch(r"blocks\.\d+\.(attn\.(c_q|c_k|c_v|proj)|mlp\.(fc|proj))\.weight", tensor) is not None
        has_adam = bool(np.any(two["optim/adam_v"][tensor]))
        has_muon = bool(np.any(two["optim/muon_momentum"][tensor]))
        check(has_muon == is_muon and has_adam == (not is_muon),
              f"{name}: {tensor} keeps Adam's state {has_adam}, Muon's {has_muon}")
        (muon if is_muon else adam).append(tensor)
    check(len(muon) == 24 and len(adam) == 18, f"{name}: {len(muon)} Muon and {len(adam)} Adam tensors, want 24 and 18")
    worst = {"v1": 0.0, "v2": 0.0, "adam p2": 0.0, "muon p2": 0.0}
    for tensor in adam:
        m1, v1 = one["optim/adam_m"][tensor], one["optim/adam_v"][tensor]
        m2, v2 = two["optim/adam_m"][tensor], two["optim/adam_v"][tensor]
        scale = np.maximum(np.abs(v1), 1e-30)
        error = np.max(np.abs(v1 - C2 / C1 ** 2 * m1 ** 2) / scale)
        worst["v1"] = max(worst["v1"], error)
        g2 = (m2 - float(np.float32(B1)) * m1) / C1
        expected_v2 = float(np.float32(B2)) * v1 + C2 * g2 ** 2
        error = np.max(np.abs(v2 - expected_v2) / np.maximum(np.abs(v2), 1e-30))
        worst["v2"] = max(worst["v2"], error)
        group = "embedding" if tensor.startswith("tok_emb") else "scalar"
        decay = WD if group == "embedding" else 0.0
        p1, p2 = one["params"][tensor], two["params"][tensor]
        step = (m2 / (1 - B1 ** 2)) / (np.sqrt(v2 / (1 - B2 ** 2)) + EPS)
        error = np.max(np.abs(p2 - (p1 * (1 - lr[group] * decay) - lr[group] * step))) / lr[group]
        worst["adam p2"] = max(worst["adam p2"], error)
    for tensor in muon:
        buf1, buf2 = one["optim/muon_momentum"][tensor], two["optim/muon_momentum"][tensor]
        g2 = buf2 - MU * buf1
        update = newton_schulz(g2 + MU * buf2)
        rows, cols = buf2.shape
        p1, p2 = one["params"][tensor], two["params"][tensor]
        expected = p1 * (1 - lr["matrix"] * WD) - lr["matrix"] * math.sqrt(max(1.0, rows / cols)) * update
        worst["muon p2"] = max(worst["muon p2"], np.max(np.abs(p2 - expected)) / lr["matrix"])
    print(f"{name}: {len(adam)} Adam and {len(muon)} Muon tensors; largest relative errors: v1 {worst['v1']:.1e}, "
          f"v2 {worst['v2']:.1e}; parameters' distance from the rules in units of lr: Adam {worst['adam p2']:.1e}, "
          f"Muon {worst['muon p2']:.1e}")
    check(worst["v1"] <= 1e-6, f"{name}: after step 1 v is not 5 m^2 (off by {worst['v1']:.2e} relative)")
    check(worst["v2"] <= 1e-5, f"{name}: v2 is not b2 v1 + (1 - b2) g^2 (off by {worst['v2']:.2e} relative)")
    check(worst["adam p2"] <= 1e-5, f"{name}: Adam's parameters are off the rule by {worst['adam p2']:.2e} lr")
    check(worst["muon p2"] <= 1e-3, f"{name}: Muon's parameters are off the rule by {worst['muon p2']:.2e} lr")


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    check_run("1 rank", train("one_rank", 1, 0))
    check_run("2 ranks at zero stage 1", train("two_ranks_zero1", 2, 1))
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("checkpoint state: all checks passed")


main()
