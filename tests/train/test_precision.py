#!/usr/bin/python3
"""train.precision: bf16 against fp32 on the tiny deck (inputs/tiny_cpu.yaml), run for real and read back
with h5py.

usage: test_precision.py KGPT SOURCE_DIR WORKDIR

Runs inputs/tiny_cpu.yaml (its data: data/tiny_cpu, made by scripts/setup.sh) for 20 steps in fp32
and in bf16 from the same seed and checks:
- the bf16 run says so in its log and really ran in bf16 (its losses are not those of fp32);
- every train loss and the val losses of the bf16 run are within 1e-2 relative of the fp32 run's.
Why 1e-2: bf16 keeps 8 significant bits, so each stored activation is off by up to 2^-8 = 3.9e-3 of
itself; the loss is a mean over 1,024 tokens of log-probabilities computed in fp32 from those
activations, so its error is of the order of that unit roundoff, not a multiple of it, and the
differences seen are near 1e-3. 1e-2, about 2.5 units, leaves room for the 20 steps of drift (the
weights, kept in fp32, take slightly different updates) and is still far below what a wrong bf16
path (a bad rounding, a lost term, an op run on the wrong buffer) moves the loss: one training step
early on moves it by 1e-1 or more.
"""

import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

KGPT, SOURCE_DIR, WORKDIR = sys.argv[1:4]
ROOT = os.path.join(WORKDIR, "precision_runs")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
ENV.pop("SLURM_NTASKS", None)
TOLERANCE = 1e-2
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def train(precision):
    run_dir = os.path.join(ROOT, precision)
    args = [KGPT, "train", "inputs/tiny_cpu.yaml", "--run-dir", run_dir, "--set", "train.iterations=20",
            "--set", "train.eval_every=10", "--set", f"train.precision={precision}"]
    result = subprocess.run(args, cwd=SOURCE_DIR, env=ENV, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        print(result.stdout, result.stderr)
        sys.exit(f"the {precision} run failed with exit code {result.returncode}")
    with h5py.File(os.path.join(run_dir, "history.h5"), "r", swmr=True) as f:
        return result.stdout, f["train/loss"][()], f["val/loss"][()]


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    log32, train32, val32 = train("fp32")
    log16, train16, val16 = train("bf16")
    check("precision:bf16" in log16, "the bf16 run's log does not say precision:bf16")
    check("precision:fp32" in log32, "the fp32 run's log does not say precision:fp32")
    check(len(train16) == len(train32) == 20, f"steps: {len(train32)} fp32, {len(train16)} bf16, want 20")
    check(len(val16) == len(val32) == 3, f"evaluations: {len(val32)} fp32, {len(val16)} bf16, want 3")
    check(not np.array_equal(train16, train32), "bf16 and fp32 gave the same losses: bf16 did not run")
    train_error = np.max(np.abs(train16 - train32) / np.abs(train32))
    val_error = np.max(np.abs(val16 - val32) / np.abs(val32))
    print(f"train loss fp32 {train32[0]:.4f} .. {train32[-1]:.4f}, bf16 {train16[0]:.4f} .. {train16[-1]:.4f}")
    print(f"largest relative difference: train {train_error:.2e}, val {val_error:.2e} (tolerance {TOLERANCE:g})")
    check(train_error <= TOLERANCE, f"train losses differ by {train_error:.2e} relative")
    check(val_error <= TOLERANCE, f"val losses differ by {val_error:.2e} relative")
    check(train32[-1] < train32[0] - 0.5, "the fp32 run did not learn")
    print(f"{'passed' if not failures else 'failed'}: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
