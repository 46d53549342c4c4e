#!/usr/bin/env python3
"""Per-step train loss of two runs of the same deck (history.h5 /train/loss), and the val loss of
each evaluation (/val/loss), e.g. a CPU run and a CUDA run: prints both values and their relative
difference for every step and evaluation, the largest, and whether it is within the pair's tolerance.

  python3 bench/device/compare_losses.py CPU_RUNS CUDA_RUNS NAME[:CUDA_NAME][@TOLERANCE]...

NAME is the run folder under both roots; NAME:CUDA_NAME compares CPU_RUNS/NAME with CUDA_RUNS/CUDA_NAME.
TOLERANCE is the largest relative difference that passes (default 1e-5, the fp32 agreement); a
tolerance of 0 prints the differences without judging them. Exits 1 when a judged pair is outside.
"""
import sys

import h5py
import numpy as np


def losses(path, group="train"):
    with h5py.File(path, "r") as f:
        if f"{group}/loss" not in f:
            return np.zeros(0), np.zeros(0)
        return np.asarray(f[f"{group}/step"][:]), np.asarray(f[f"{group}/loss"][:], dtype=np.float64)


def main():
    cpu_root, cuda_root, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
    failed = False
    for pair in pairs:
        names, _, tolerance = pair.partition("@")
        tolerance = float(tolerance) if tolerance else 1e-5
        cpu_name, _, cuda_name = names.partition(":")
        cuda_name = cuda_name or cpu_name
        steps, cpu = losses(f"{cpu_root}/{cpu_name}/history.h5")
        _, cuda = losses(f"{cuda_root}/{cuda_name}/history.h5")
        n = min(len(cpu), len(cuda))
        rel = np.abs(cuda[:n] - cpu[:n]) / np.abs(cpu[:n])
        for s, a, b, r in zip(steps[:n], cpu[:n], cuda[:n], rel):
            print(f"{cpu_name} vs {cuda_name} step {int(s):2d}  cpu {a:.7f}  cuda {b:.7f}  rel {r:.2e}")
        worst = float(rel.max()) if n else float("inf")
        # The evaluations' losses too, where the CPU run has them (the weights they score included).
        val_steps, cpu_val = losses(f"{cpu_root}/{cpu_name}/history.h5", "val")
        _, cuda_val = losses(f"{cuda_root}/{cuda_name}/history.h5", "val")
        if len(cpu_val):
            if len(cuda_val) != len(cpu_val):
                print(f"{cpu_name} vs {cuda_name}: {len(cpu_val)} CPU evaluations, {len(cuda_val)} CUDA ones")
                worst = float("inf")
            else:
                val_rel = np.abs(cuda_val - cpu_val) / np.abs(cpu_val)
                for s, a, b, r in zip(val_steps, cpu_val, cuda_val, val_rel):
                    print(f"{cpu_name} vs {cuda_name} val at step {int(s):2d}  cpu {a:.7f}  cuda {b:.7f}  rel {r:.2e}")
                worst = max(worst, float(val_rel.max()))
        if tolerance > 0:
            verdict = "within" if worst <= tolerance and n == len(cpu) else "OUTSIDE"
            failed |= verdict != "within"
            verdict = f"{verdict} {tolerance:.0e}"
        else:
            verdict = "for scale"
        print(f"loss agreement cpu {cpu_name} vs cuda {cuda_name}: {n} steps, max relative difference {worst:.2e} ({verdict})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
