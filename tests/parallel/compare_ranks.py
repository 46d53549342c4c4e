"""Checks the data-parallel runs written by train_ranks (docs/design.md, sections 5 to 8).

usage: compare_ranks.py REFERENCE_PREFIX:W[:no-overlap|:zero1] PREFIX:W[:no-overlap|:zero1]...

The first run is the reference (world size 1). For every run: every rank ends with bit-identical
parameters and the same losses; gradient averaging ran once per step over every gradient exactly
once (bytes = 4 x parameter buffer), never before the last micro-step, in one call without
overlap and in several buckets with it; at stage 1 each piece goes to its owner and the parameters
are all-gathered once per step (bytes = 4 x parameter buffer), at stage 0 never. Across runs: train losses within 1e-5 relative, final
parameters within 1e-5 relative (L2 norm of the difference over the norm of the parameters; Adam's
normalised step on a near-zero gradient turns reduction-order differences into single elements
moving by up to lr-sized amounts, so elements are held to 1e-4), val loss within 1e-5 relative.
A run with parallel.zero_stage: 1 (":zero1") must equal the stage-0 run of its world size bit for
bit: the same averaged gradients, each tensor updated by one rank with the same kernels, then
gathered; with gradient clipping, the global norm is summed from the shards' float partial sums in
another grouping, so the clipping factor may differ in its last bit: then within 1e-6 relative.

The first step's gradient norm, before clipping, is compared across world sizes on its own: the
optimizers hide a wrong scale of the averaged gradient (Adam's and Muon's updates do not change
when every gradient is multiplied by a constant), so losses and parameters would pass. On the first
step every run starts from the same parameters and each micro-batch's gradient is computed from the
same sequences by the same kernels; only the order of the sums over the 8 micro-batches differs. In
fp32 a sum of 8 terms rounds by at most 7 x 2^-24 = 4.2e-7 of the terms' magnitude, element by
element, so the norm moves by about that much: 1e-5 relative is a 24x margin above it, and 5e4
times below the 0.5 of a gradient averaged with 1/W^2 instead of 1/W at W = 2. Where clipping is on,
every step's norm must exceed the clipping norm at world size 1 (the clipping acts on every step).
"""

import sys

import h5py
import numpy as np


def load(prefix, world_size):
    ranks = []
    for r in range(world_size):
        with h5py.File(f"{prefix}.rank{r}.h5", "r") as f:
            ranks.append({name: f[name][()] for name in f.keys()})
            assert int(f["parameters"].attrs["world_size"]) == world_size, f"{prefix}: world size attribute"
    return ranks


def main(argv):
    failures = []

    def check(ok, message):
        if not ok:
            failures.append(message)

    runs = []
    for spec in argv[1:]:
        parts = spec.split(":")
        prefix, world_size = parts[0], int(parts[1])
        overlap = len(parts) < 3 or parts[2] != "no-overlap"
        zero1 = len(parts) >= 3 and parts[2] == "zero1"
        runs.append((prefix, world_size, overlap, load(prefix, world_size), zero1))

    reference = runs[0][3][0]
    stage0 = {run[1]: run[3][0] for run in runs if run[2] and not run[4]}
    steps = len(reference["train_loss"])
    check(steps >= 20, f"reference ran {steps} steps, want at least 20")
    check(reference["train_loss"][-1] < reference["train_loss"][0] - 0.1, "reference loss did not fall")

    clip = float(reference["grad_clip_norm"])
    if clip > 0:
        check((reference["grad_norm"] > clip).all(),
              f"clipping at {clip} does not act on every step: gradient norms {reference['grad_norm']}")
    for prefix, world_size, overlap, ranks, zero1 in runs:
        name = f"world size {world_size}{'' if overlap else ' without overlap'}{' at zero stage 1' if zero1 else ''}"
        if zero1:
            same = stage0.get(world_size)
            check(same is not None, f"{name}: no stage-0 run of world size {world_size} to compare with")
            if same is not None and clip > 0:
                losses = np.abs(ranks[0]["train_loss"] - same["train_loss"]) / np.abs(same["train_loss"])
                check(losses.max() <= 1e-6, f"{name}: train losses differ from stage 0's by {losses.max():.2e}")
            elif same is not None:
                check(np.array_equal(ranks[0]["train_loss"], same["train_loss"]),
                      f"{name}: train losses differ from stage 0's")
                check(np.array_equal(ranks[0]["parameters"], same["parameters"]),
                      f"{name}: final parameters differ from stage 0's")
        first_norm = abs(ranks[0]["grad_norm"][0] - reference["grad_norm"][0]) / reference["grad_norm"][0]
        check(first_norm <= 1e-5, f"{name}: the first step's gradient norm differs from world size 1's by "
                                  f"{first_norm:.2e} relative (a wrong scale of the average?)")
        root = ranks[0]
        for r, rank in enumerate(ranks[1:], start=1):
            check(np.array_equal(rank["parameters"], root["parameters"]),
                  f"{name}: rank {r}'s final parameters differ from rank 0's")
            check(np.array_equal(rank["train_loss"], root["train_loss"]), f"{name}: rank {r}'s losses differ")
        calls, nbytes = root["allreduce_calls"], root["allreduce_bytes"]
        early = root["allreduce_calls_before_last_micro_step"]
        check(not early.any(), f"{name}: gradient collectives before the last micro-step: {early}")
        if world_size == 1:
            check(not calls.any() and not nbytes.any(), f"{name}: a single rank communicated: {calls}")
        else:
            buffer_bytes = 4 * root["parameters"].size
            check((nbytes == buffer_bytes).all(),
                  f"{name}: averaged {sorted(set(nbytes.tolist()))} bytes per step, want every gradient once "
                  f"({buffer_bytes})")
            check((calls == calls[0]).all(), f"{name}: collective calls vary between steps: {calls}")
            if overlap:
                check(calls[0] > 1, f"{name}: overlap on with small buckets made {calls[0]} call(s) per step")
            else:
                check(calls[0] == 1, f"{name}: overlap off made {calls[0]} calls per step, want 1")
        gather_calls, gather_bytes = root["allgather_calls"], root["allgather_bytes"]
        if zero1 and world_size > 1:
            # Each bucket is reduced to the owners of its pieces: at least one call per rank.
            check((calls >= world_size).all(), f"{name}: {calls[0]} reduce call(s) for {world_size} owners")
            check((gather_calls == 1).all(), f"{name}: parameter all-gather calls per step {gather_calls}, want 1")
            check((gather_bytes == 4 * root["parameters"].size).all(),
                  f"{name}: all-gathered {sorted(set(gather_bytes.tolist()))} bytes per step, want the whole buffer")
        else:
            check(not gather_calls.any() and not gather_bytes.any(), f"{name}: a parameter all-gather at stage 0")
        loss_error = np.max(np.abs(root["train_loss"] - reference["train_loss"]) / np.abs(reference["train_loss"]))
        difference = root["parameters"].astype(np.float64) - reference["parameters"]
        param_error = np.linalg.norm(difference) / np.linalg.norm(reference["parameters"].astype(np.float64))
        element_error = np.max(np.abs(difference))
        val_error = abs(root["val_loss"] - reference["val_loss"]) / abs(reference["val_loss"])
        print(f"{name}: {len(ranks)} ranks, {int(calls[0])} gradient call(s) per step, "
              f"first gradient norm {first_norm:.1e} apart, "
              f"max relative loss difference {loss_error:.2e}, relative parameter difference {param_error:.2e} "
              f"(largest element {element_error:.2e}), "
              f"val loss {float(root['val_loss']):.6f} (relative difference {val_error:.2e})")
        check(loss_error <= 1e-5, f"{name}: train losses differ from world size 1 by {loss_error:.2e} relative")
        check(param_error <= 1e-5, f"{name}: final parameters differ from world size 1 by {param_error:.2e} relative")
        check(element_error <= 1e-4, f"{name}: a final parameter differs from world size 1 by {element_error:.2e}")
        check(val_error <= 1e-5, f"{name}: val loss differs from world size 1 by {val_error:.2e} relative")

    for message in failures:
        print("FAIL:", message)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
