#!/usr/bin/python3
"""parallel.zero_stage: 1 against stage 0 through `kgpt train` under mpiexec, read back with h5py.

usage: test_zero_stage.py KGPT MPIEXEC SOURCE_DIR WORKDIR

inputs/tiny_cpu.yaml (golf, Muon) and the same deck as gpt2 (AdamW), 12 steps on 2 ranks, a
checkpoint every 6 steps, at stage 0 and stage 1:
- the losses of every step and the final val loss are the same, bit for bit, and so is every tensor
  of the final checkpoint (parameters and optimizer state: stage 1 gathers each rank's shard of the
  state into the same format);
- the log names the sharded optimizer state in its memory plan, smaller than stage 0's;
- history.h5 records the parameter all-gather at stage 1 (one call, the whole buffer, each step) and
  none at stage 0, and the same gradient norms (to 1e-12: stage 1 sums the shards' squared norms);
- gpt2 with gradient clipping that acts on every step (the global norm summed over the shards
  before any update) gives stage 0's losses within 1e-6 relative (the norm's float partial sums
  are grouped by shard, so the clipping factor may differ in its last bit);
- the stage-1 run resumed from its step-6 checkpoint on 1 rank at stage 0, and on 4 ranks at stage 1,
  ends at the same step-12 loss as the uninterrupted run: a run resumes across stages and world
  sizes;
- golf on 2 and 4 ranks with Muon shared across ranks (parallel.share_muon, the default) equals the
  runs where every rank orthogonalises every matrix, bit for bit, and records its exchanges.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

KGPT, MPIEXEC, SOURCE_DIR, WORKDIR = sys.argv[1:5]
ROOT = os.path.join(WORKDIR, "zero_stage_runs")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
ENV.pop("SLURM_NTASKS", None)
COMMON = ["train.iterations=12", "train.log_every=1", "train.eval_every=6", "run.checkpoint_every=6"]
GPT2 = ["model.family=gpt2", "model.n_kv_head=4", "optim.matrix_lr=0.003", "optim.embed_lr=0.003",
        "optim.scalar_lr=0.003"]
FAMILIES = {
    "golf": [],
    "gpt2": GPT2,
    "gpt2_clipped": GPT2 + ["train.grad_clip_norm=0.05"],
}
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def train(run_dir, ranks, stage, overrides, resume=False):
    args = [MPIEXEC, "--oversubscribe", "-n", str(ranks), KGPT, "train", "inputs/tiny_cpu.yaml", "--run-dir", run_dir]
    for o in COMMON + overrides + [f"parallel.zero_stage={stage}"]:
        args += ["--set", o]
    if resume:
        args.append("--resume")
    r = subprocess.run(args, cwd=SOURCE_DIR, env=ENV, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(f"{run_dir}: kgpt train failed with exit code {r.returncode}")
    with open(os.path.join(run_dir, "log.txt")) as f:
        return f.read()


def losses(log):
    return [float(x) for x in re.findall(r"train_loss:([0-9.]+)", log)]


def tensors(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: out.__setitem__(name, item[()])
                     if isinstance(item, h5py.Dataset) and name.startswith(("params/", "optim/")) else None)
    return out


def read_history(path):
    with h5py.File(path, "r") as f:
        return {name: f["train"][name][()] for name in f["train"].keys()}


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    for family, overrides in FAMILIES.items():
        logs = {stage: train(os.path.join(ROOT, f"{family}_z{stage}"), 2, stage, overrides) for stage in (0, 1)}
        history = [read_history(os.path.join(ROOT, f"{family}_z{s}", "history.h5")) for s in (0, 1)]
        check(len(losses(logs[0])) >= 12, f"{family}: stage 0 logged {len(losses(logs[0]))} losses")
        if "clipped" in family:
            # The clipping norm adds the shards' float partial sums in another grouping than the
            # whole buffer's: the factor can differ in its last bit, the losses by far less than 1e-6.
            relative = np.abs(history[1]["loss"] - history[0]["loss"]) / np.abs(history[0]["loss"])
            check(relative.max() <= 1e-6, f"{family}: stage 1's losses differ from stage 0's by {relative.max():.2e}")
            norms = [h["grad_norm"] for h in history]
            check((norms[0] > 0.05).all(), f"{family}: clipping did not act on every step: {norms[0]}")
            check(np.allclose(norms[0], norms[1], rtol=1e-6, atol=0), f"{family}: gradient norms differ: {norms}")
            print(f"{family}: stage 1 within {relative.max():.1e} of stage 0 over 12 clipped steps")
            continue
        check(losses(logs[0]) == losses(logs[1]), f"{family}: stage 1's losses differ from stage 0's")
        check((history[0]["loss"] == history[1]["loss"]).all(), f"{family}: the histories' losses differ")
        val = [re.findall(r"val_loss:([0-9.]+)", logs[s]) for s in (0, 1)]
        check(val[0] == val[1], f"{family}: val losses differ: {val}")
        plans = [float(re.search(r"optimizer_state:([0-9.]+)", logs[s]).group(1)) for s in (0, 1)]
        check(plans[1] < plans[0], f"{family}: the plan's optimizer state does not shrink at stage 1: {plans}")
        final = [tensors(os.path.join(ROOT, f"{family}_z{s}", "checkpoints", "ckpt_00000012.h5")) for s in (0, 1)]
        check(final[0].keys() == final[1].keys() and any(k.startswith("optim/") for k in final[0]),
              f"{family}: the checkpoints hold different tensors")
        differing = [k for k in final[0] if k in final[1] and not np.array_equal(final[0][k], final[1][k])]
        check(not differing, f"{family}: checkpoint tensors differ between stages: {differing[:5]}")
        buffer_bytes = history[0]["allreduce_bytes"]  # the whole gradient buffer, padding included
        check(not history[0]["allgather_calls"].any() and not history[0]["allgather_bytes"].any(),
              f"{family}: stage 0 recorded a parameter all-gather")
        check((history[1]["allgather_calls"] == 1).all() and (history[1]["allgather_bytes"] == buffer_bytes).all(),
              f"{family}: stage 1's all-gather per step: calls {history[1]['allgather_calls']}, "
              f"bytes {history[1]['allgather_bytes']} (want 1 and {buffer_bytes[0]})")
        check((history[1]["allreduce_bytes"] == buffer_bytes).all(), f"{family}: the gradient bytes differ between stages")
        check((history[1]["allreduce_calls"] >= 2).all(), f"{family}: stage 1 reduced to fewer than 2 owners")
        norms = [h["grad_norm"] for h in history]
        check(np.allclose(norms[0], norms[1], rtol=1e-12, atol=0), f"{family}: gradient norms differ: {norms}")

        # Resume the stage-1 run from step 6 on other world sizes and stages.
        end = losses(logs[1])[-1]
        for ranks, stage in ((1, 0), (4, 1)):
            run_dir = os.path.join(ROOT, f"{family}_resume_w{ranks}_z{stage}")
            shutil.copytree(os.path.join(ROOT, f"{family}_z1"), run_dir)
            os.remove(os.path.join(run_dir, "checkpoints", "ckpt_00000012.h5"))
            log = train(run_dir, ranks, stage, overrides, resume=True)
            check("resumed_from:" in log and "ckpt_00000006.h5" in log, f"{run_dir}: did not resume from step 6")
            resumed = losses(log)
            check(resumed and resumed[-1] == end,
                  f"{family}: resumed on {ranks} rank(s) at stage {stage}: step-12 loss {resumed[-1:]} != {end}")
        print(f"{family}: stage 1 equals stage 0 over 12 steps; resumed at W=1 stage 0 and W=4 stage 1 to loss {end}")
    share_muon()
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("zero stage: all checks passed")


def share_muon():
    """parallel.share_muon (the default) against every rank running the whole Muon update, golf at
    stage 0 on 2 and 4 ranks: each rank orthogonalises a share of the matrices and the updates are
    exchanged exactly as computed, so losses, gradient norms and every checkpoint tensor are equal
    bit for bit; the history counts one exchange of the same bytes per step, none unshared."""
    for ranks in (2, 4):
        runs = {share: os.path.join(ROOT, f"golf_w{ranks}_share_muon_{share}") for share in ("true", "false")}
        logs = {share: train(run, ranks, 0, [f"parallel.share_muon={share}"]) for share, run in runs.items()}
        history = {share: read_history(os.path.join(run, "history.h5")) for share, run in runs.items()}
        check(losses(logs["true"]) == losses(logs["false"]), f"W={ranks}: shared Muon's losses differ")
        check(re.findall(r"val_loss:([0-9.]+)", logs["true"]) == re.findall(r"val_loss:([0-9.]+)", logs["false"]),
              f"W={ranks}: shared Muon's val losses differ")
        check((history["true"]["grad_norm"] == history["false"]["grad_norm"]).all(),
              f"W={ranks}: shared Muon's gradient norms differ")
        final = {share: tensors(os.path.join(run, "checkpoints", "ckpt_00000012.h5")) for share, run in runs.items()}
        differing = [k for k in final["true"] if not np.array_equal(final["true"][k], final["false"].get(k))]
        check(final["true"].keys() == final["false"].keys() and not differing,
              f"W={ranks}: checkpoint tensors differ with shared Muon: {differing[:5]}")
        exchanged = history["true"]["muon_exchange_bytes"]
        check((history["true"]["muon_exchange_calls"] == 1).all() and exchanged[0] > 0 and (exchanged == exchanged[0]).all(),
              f"W={ranks}: shared Muon's exchange per step: calls {history['true']['muon_exchange_calls']}, bytes {exchanged}")
        check(not history["false"]["muon_exchange_calls"].any() and not history["false"]["muon_exchange_bytes"].any(),
              f"W={ranks}: unshared Muon recorded an exchange")
        check("muon_exchange_bytes:" in logs["true"] and "muon_exchange_bytes:" not in logs["false"],
              f"W={ranks}: the log lines do not say which run exchanged Muon's updates")
        print(f"share_muon on {ranks} ranks: equal to every rank's whole update over 12 steps, "
              f"{exchanged[0]} bytes exchanged a step")


main()
