#!/usr/bin/env python3
"""Per-step train loss of two runs of the same deck (history.h5 /train/loss), e.g. a CPU run and a
CUDA run: prints both values and their relative difference for every step, then the largest.

  python3 bench/device/compare_losses.py CPU_RUNS CUDA_RUNS NAME[:CUDA_NAME]...

NAME is the run folder under both roots; NAME:CUDA_NAME compares CPU_RUNS/NAME with CUDA_RUNS/CUDA_NAME.
"""
import sys

import h5py
import numpy as np


def losses(path):
    with h5py.File(path, "r") as f:
        return np.asarray(f["train/step"][:]), np.asarray(f["train/loss"][:], dtype=np.float64)


def main():
    cpu_root, cuda_root, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    worst_all = 0.0  # over the fp32 runs (names without ":")
    for pair in names:
        cpu_name, _, cuda_name = pair.partition(":")
        name = cuda_name or cpu_name
        steps, cpu = losses(f"{cpu_root}/{cpu_name}/history.h5")
        _, cuda = losses(f"{cuda_root}/{name}/history.h5")
        n = min(len(cpu), len(cuda))
        rel = np.abs(cuda[:n] - cpu[:n]) / np.abs(cpu[:n])
        for s, a, b, r in zip(steps[:n], cpu[:n], cuda[:n], rel):
            print(f"{name} step {int(s):2d}  cpu {a:.7f}  cuda {b:.7f}  rel {r:.2e}")
        print(f"{name}: {n} steps, max relative difference {rel.max():.2e}")
        if not cuda_name:
            worst_all = max(worst_all, float(rel.max()))
    print(f"loss agreement (fp32 runs): max relative difference {worst_all:.2e} ({'within' if worst_all < 1e-4 else 'above'} 1e-4)")


if __name__ == "__main__":
    main()
