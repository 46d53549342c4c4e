#!/usr/bin/python3
"""Gradient clipping (train.grad_clip_norm) against PyTorch's own: torch.nn.utils.clip_grad_norm_
and torch.optim.Adam on reference_models.py's Golf (float64), with the real kgpt.

usage: test_grad_clip.py KGPT MPIEXEC WORKDIR

A small golf model starts from weights this script writes (model.init_from) and takes one step
with Adam on every tensor (optim.matrix_optimizer adamw, one learning rate, no weight decay) at an
epsilon large enough that the update follows the gradient's scale, which clipping sets. Two sets of
start weights (random ones, and those of the same model trained for 100 steps) give a gradient norm
above 2 and one below 0.5, and each runs with the threshold at half the norm (clipped) and at twice
it (not clipped): so a threshold lies between the norm and its
square on both sides of 1, where a rule that mixed them up (or left out the square root) would clip
when it must not, or not clip when it must. Checks:
- history.h5's grad_norm (before clipping) equals PyTorch's global norm, to 1e-5;
- the weights after the step equal PyTorch's after clip_grad_norm_ and Adam's step, to 1e-3 of the
  largest update, where a gradient 10% off its right scale gives a step more than 20 times that away;
- on 2 ranks with parallel.zero_stage 1 (each rank holds a shard of the gradients, so the norm is
  summed over ranks) the clipped step agrees with PyTorch's too.
"""

import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_models import FAMILIES  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from golf_runs import (SMALL_GOLF_SECTIONS, check, failures, fresh_text_shards, golf_settings, runner,  # noqa: E402
                       start_weights, write_safetensors)

KGPT, MPIEXEC, WORKDIR = sys.argv[1:4]
ROOT = os.path.join(WORKDIR, "grad_clip")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
SEQ, BATCH = 16, 256
LR, EPS, BETAS = 0.05, 0.02, (0.9, 0.95)
run = runner(ROOT, ENV)

DECK = SMALL_GOLF_SECTIONS + f"""\
optim:
  matrix_optimizer: adamw
  matrix_lr: {LR}
  scalar_lr: {LR}
  embed_lr: {LR}
  adam_eps: {EPS}
  beta1: {BETAS[0]}
  beta2: {BETAS[1]}
  weight_decay: 0
train:
  seq_len: {SEQ}
  global_batch_tokens: {BATCH}
  accum_total: 2
  iterations: 1
  warmdown_iters: 0
  eval_every: 0
  val_tokens: 320
  log_every: 1
"""


def reference(weights, tokens, settings, max_norm, off_by=1.0):
    """PyTorch's global gradient norm of the step's batch, and the weights after clip_grad_norm_
    (max_norm None: no clipping), the gradients then scaled by `off_by` (a wrong scale, to see that
    the test tells it apart), and one Adam step, in float64."""
    params = {k: torch.tensor(v, dtype=torch.float64) for k, v in weights.items()}
    model = FAMILIES["golf"](params, settings)
    # accum_total 2: two micro-batches of BATCH / 2 tokens, each taking one token more from the
    # stream for its last target (on 1 rank one after the other, on 2 ranks one each).
    half = BATCH // 2
    chunks = [tokens[i * (half + 1):(i + 1) * (half + 1)] for i in range(2)]
    x = torch.tensor([t for c in chunks for t in c[:-1]], dtype=torch.long).view(-1, SEQ)
    y = torch.tensor([t for c in chunks for t in c[1:]], dtype=torch.long).view(-1, SEQ)
    logits = model.logits(x)
    F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).backward()
    norm = float(torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters())))
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    for p in model.parameters():
        p.grad *= off_by
    torch.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS).step()
    return norm, {k.replace("__", "."): v.detach().numpy() for k, v in model.p.items()}


def kgpt_step(name, start_file, max_norm, ranks=1, extra=()):
    """kgpt's grad_norm of the first step and the weights after it."""
    run_dir = os.path.join(ROOT, name)
    args = [KGPT, "train", "deck.yaml", "--run-dir", run_dir, "--set", f"model.init_from={start_file}",
            "--set", f"train.grad_clip_norm={max_norm!r}"]
    for s in extra:
        args += ["--set", s]
    if ranks > 1:
        args = [MPIEXEC, "--oversubscribe", "-n", str(ranks)] + args
    run(args)
    with h5py.File(os.path.join(run_dir, "history.h5"), "r") as f:
        norm = float(f["train/grad_norm"][0])
    with h5py.File(os.path.join(run_dir, "checkpoints", "ckpt_00000001.h5"), "r") as f:
        weights = {k: np.array(f["params"][k], dtype=np.float64) for k in f["params"]}
    return norm, weights


def largest(a, b):
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def main():
    tokens = fresh_text_shards(ROOT)
    with open(os.path.join(ROOT, "deck.yaml"), "w") as f:
        f.write(DECK)
    # The tensors' names and shapes, and the model settings, from a step of kgpt's own.
    run([KGPT, "train", "deck.yaml", "--run-dir", os.path.join(ROOT, "shapes")])
    with h5py.File(os.path.join(ROOT, "shapes", "checkpoints", "ckpt_00000001.h5"), "r") as f:
        shapes = {name: f["params"][name].shape for name in f["params"]}
        text = f["metadata/deck"][()]
    settings = golf_settings(yaml.safe_load(text.decode() if isinstance(text, bytes) else text)["model"])
    torch.set_default_dtype(torch.float64)

    # Random start weights give a large gradient; those of a model trained for 100 steps on the same
    # text a small one.
    starts = {"random": start_weights(shapes, 11, 0.5)}
    run([KGPT, "train", "deck.yaml", "--run-dir", os.path.join(ROOT, "trained"), "--set", "train.iterations=100",
         "--set", "optim.adam_eps=1e-8", "--set", "optim.matrix_lr=0.01", "--set", "optim.scalar_lr=0.01",
         "--set", "optim.embed_lr=0.01"])
    with h5py.File(os.path.join(ROOT, "trained", "checkpoints", "ckpt_00000100.h5"), "r") as f:
        starts["trained"] = {name: np.array(f["params"][name]) for name in f["params"]}
    for label, weights in starts.items():
        write_safetensors(os.path.join(ROOT, f"start_{label}.safetensors"), weights)
    norms = {label: reference(w, tokens, settings, None)[0] for label, w in starts.items()}
    print(f"PyTorch's gradient norms: random weights {norms['random']:.4f}, trained weights {norms['trained']:.4f}")
    check(norms["random"] > 2 and norms["trained"] < 0.5,
          f"the start weights give norms {norms}; the test needs one above 2 and one below 0.5")

    for label in starts:
        for factor in (0.5, 2.0):
            max_norm = norms[label] * factor
            _, expected = reference(starts[label], tokens, settings, max_norm)
            _, wrong = reference(starts[label], tokens, settings, max_norm, off_by=0.9)
            norm, got = kgpt_step(f"{label}_{factor}", f"start_{label}.safetensors", max_norm)
            scale = largest(expected, starts[label])  # the largest update
            error, apart = largest(got, expected), largest(wrong, expected)
            print(f"{label} weights, threshold {factor} x the norm ({max_norm:.4f}): grad_norm {norm:.6f} (PyTorch "
                  f"{norms[label]:.6f}); weights within {error:.3g} of PyTorch's step, largest update {scale:.3g}; "
                  f"the step of a gradient 10% off is {apart:.3g} away")
            check(abs(norm - norms[label]) <= 1e-5 * norms[label],
                  f"{label}: grad_norm {norm}, PyTorch {norms[label]}")
            check(error <= 1e-3 * scale, f"{label}, threshold {factor} x the norm: kgpt's step is {error:.3g} from "
                                         f"PyTorch's (largest update {scale:.3g})")
            check(apart > 20 * 1e-3 * scale, f"{label}, threshold {factor} x the norm: a gradient 10% off gives a "
                                             f"step only {apart:.3g} away; the test cannot tell")

    # A shard of the gradients on each rank: the norm is summed over ranks before clipping.
    max_norm = norms["random"] * 0.5
    _, expected = reference(starts["random"], tokens, settings, max_norm)
    norm, got = kgpt_step("random_zero1_two_ranks", "start_random.safetensors", max_norm, ranks=2,
                          extra=["parallel.zero_stage=1"])
    error, scale = largest(got, expected), largest(expected, starts["random"])
    print(f"2 ranks, zero stage 1: grad_norm {norm:.6f}; weights within {error:.3g} of PyTorch's")
    check(abs(norm - norms["random"]) <= 1e-5 * norms["random"],
          f"zero stage 1: grad_norm {norm}, PyTorch {norms['random']}")
    check(error <= 1e-3 * scale, f"zero stage 1 on 2 ranks: kgpt's clipped step is {error:.3g} from PyTorch's")

    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("gradient clipping: all checks passed")


main()
