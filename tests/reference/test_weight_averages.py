#!/usr/bin/python3
"""EMA and SWA of the weights (train.ema_decay, train.swa_every) against an independent numpy
implementation of their definitions, with the real kgpt.

usage: test_weight_averages.py KGPT SOURCE_DIR WORKDIR

A small golf model starts from weights this script writes (model.init_from, so the EMA's start is
known here) and trains 24 steps with a 12-step warmdown, keeping an EMA (decay 0.9) and an SWA (every
3 steps below a learning-rate multiplier of 0.6), a checkpoint after every step. Checks:
- every checkpoint's /average/ema equals numpy's float32 recurrence ema = d ema + (1 - d) w over
  the weights of all the checkpoints before it, from the start file (to 1e-6 of the largest weight);
- /average/swa equals the float64 mean of the weights at the steps the definition picks (from the
  schedule's multiplier, computed here), and /state/swa_count their number;
- a run resumed from step 12 writes the step-24 checkpoint bit for bit (weights, optimizer state,
  both averages, the count; all but the wall time), and so does a run without the evaluations every
  8 steps (an evaluation swaps the EMA in and out);
- train.eval_weights: ema logs weights:ema with the figure `kgpt eval --weights ema` prints, which
  equals reference_models.py's Golf (float64) on the checkpoint's EMA to 2e-5; --weights swa and
  live differ from it;
- `kgpt export --weights swa` stores the SWA (fp16 tensors equal to the SWA rounded to fp16);
- kgpt check's memory plan lists the averages;
- bad uses end with exit code 2 naming the key or file: --weights ema of a checkpoint without an EMA,
  of an artifact, a misspelt --weights, eval_weights: ema without train.ema_decay.
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
from golf_runs import check, failures, golf_settings, runner, start_weights, text_tokens, write_safetensors  # noqa: E402
from shards import write_shard  # noqa: E402

KGPT, SOURCE_DIR, WORKDIR = sys.argv[1:4]
ROOT = os.path.join(WORKDIR, "weight_averages")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")
SEQ, VAL_TOKENS, STEPS, WARMDOWN = 16, 320, 24, 12
DECAY, SWA_EVERY, SWA_START = 0.9, 3, 0.6
run = runner(ROOT, ENV)


def read_group(path, group):
    with h5py.File(path, "r") as f:
        return {name: np.array(f[group][name], dtype=np.float32) for name in f[group]}


def multiplier(i):
    """The schedule's learning-rate multiplier at step index i (constant schedule, warmdown)."""
    start = STEPS - WARMDOWN
    return (STEPS - i) / WARMDOWN if start <= i < STEPS else 1.0


def kgpt_eval(checkpoint, weights):
    line = run([KGPT, "eval", checkpoint, "--weights", weights]).stdout
    found = re.search(r"val_loss:([0-9.]+) .* weights:(\w+)", line)
    check(found is not None and found.group(2) == weights, f"eval --weights {weights}: {line}")
    return float(found.group(1)) if found else float("nan")


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    write_shard(os.path.join(ROOT, "train_000000.bin"), text_tokens(1, 20000))
    val = text_tokens(2, VAL_TOKENS + 1)
    write_shard(os.path.join(ROOT, "val_000000.bin"), val)
    deck = os.path.join(SOURCE_DIR, "inputs", "tiny_cpu.yaml")
    base = ["data.train_files=train_*.bin", "data.val_files=val_*.bin", f"train.seq_len={SEQ}",
            "train.global_batch_tokens=256", "train.accum_total=1", f"train.iterations={STEPS}", "train.eval_every=0",
            f"train.warmdown_iters={WARMDOWN}", f"train.val_tokens={VAL_TOKENS}", "model.n_layer=2",
            "model.d_model=32", "model.n_head=2", "model.n_kv_head=1", "run.checkpoint_every=1",
            "run.checkpoint_keep_last=100"]

    def train(run_dir, extra, *flags):
        args = [KGPT, "train", deck, "--run-dir", run_dir, *flags]
        for s in base + extra:
            args += ["--set", s]
        return run(args)

    # A plain run: the names and shapes, and a checkpoint without averages.
    plain = os.path.join(ROOT, "plain")
    train(plain, [])
    plain_last = os.path.join(plain, "checkpoints", f"ckpt_{STEPS:08d}.h5")
    shapes = {name: value.shape for name, value in read_group(plain_last, "params").items()}
    start = start_weights(shapes, 7, 0.05)
    write_safetensors(os.path.join(ROOT, "start.safetensors"), start)

    averaged = ["model.init_from=start.safetensors", f"train.ema_decay={DECAY}", f"train.swa_every={SWA_EVERY}",
                f"train.swa_start_lr={SWA_START}", "train.eval_weights=ema"]
    full = os.path.join(ROOT, "full")
    log = train(full, averaged + ["train.eval_every=8"]).stdout
    checkpoints = [os.path.join(full, "checkpoints", f"ckpt_{s:08d}.h5") for s in range(1, STEPS + 1)]
    # Evaluating an average swaps it in and out: training goes on as if no evaluation had run.
    quiet = os.path.join(ROOT, "quiet")
    train(quiet, averaged)
    with h5py.File(checkpoints[-1], "r") as a, h5py.File(os.path.join(quiet, "checkpoints", f"ckpt_{STEPS:08d}.h5"), "r") as b:
        for group in ("params", "average/ema", "average/swa"):
            same = all(np.array_equal(np.array(a[group][n]), np.array(b[group][n])) for n in a[group])
            check(same, f"evaluations every 8 steps changed the run's {group}")

    # The EMA, step by step, in float32 as the definition says.
    d = np.float32(DECAY)
    rest = np.float32(1) - d
    ema = {k: v.copy() for k, v in start.items()}
    snapshots, worst_ema, worst_swa = [], 0.0, 0.0
    for s, path in enumerate(checkpoints, start=1):
        weights = read_group(path, "params")
        ema = {k: d * ema[k] + rest * weights[k] for k in ema}
        stored = read_group(path, "average/ema")
        scale = max(float(np.abs(v).max()) for v in weights.values())
        worst_ema = max(worst_ema, max(float(np.abs(stored[k] - ema[k]).max()) for k in ema) / scale)
        if s % SWA_EVERY == 0 and multiplier(s - 1) < SWA_START:
            snapshots.append(weights)
        with h5py.File(path, "r") as f:
            count = int(f["state/swa_count"][()])
        check(count == len(snapshots), f"step {s}: swa_count {count}, the definition picks {len(snapshots)}")
        if snapshots:
            stored = read_group(path, "average/swa")
            mean = {k: np.mean([w[k].astype(np.float64) for w in snapshots], axis=0) for k in weights}
            worst_swa = max(worst_swa, max(float(np.abs(stored[k] - mean[k]).max()) for k in mean) / scale)
    check(worst_ema <= 1e-6, f"the EMA is {worst_ema:.3g} (of the largest weight) from numpy's")
    check(worst_swa <= 1e-6, f"the SWA is {worst_swa:.3g} (of the largest weight) from numpy's")
    expected_count = sum(1 for s in range(1, STEPS + 1) if s % SWA_EVERY == 0 and multiplier(s - 1) < SWA_START)
    check(len(snapshots) == expected_count and expected_count >= 3, f"{len(snapshots)} SWA snapshots")
    print(f"EMA within {worst_ema:.2g}, SWA within {worst_swa:.2g} of the largest weight; {len(snapshots)} snapshots")

    # Resumed from step 12: the same step-24 checkpoint, bit for bit.
    resumed = os.path.join(ROOT, "resumed")
    shutil.copytree(full, resumed)
    for s in range(13, STEPS + 1):
        os.remove(os.path.join(resumed, "checkpoints", f"ckpt_{s:08d}.h5"))
    train(resumed, averaged + ["train.eval_every=8"], "--resume")
    with h5py.File(checkpoints[-1], "r") as a, h5py.File(os.path.join(resumed, "checkpoints", f"ckpt_{STEPS:08d}.h5"), "r") as b:
        differing = []
        def compare(name, item):
            # The wall time differs from run to run; everything else must not.
            if isinstance(item, h5py.Dataset) and not name.startswith("metadata") and name != "state/training_seconds":
                if name not in b or not np.array_equal(np.array(item), np.array(b[name])):
                    differing.append(name)
        a.visititems(compare)
        check(not differing, f"resumed at step 12, the step-24 checkpoint differs in {differing[:5]}")
        check("average/ema" in b and "average/swa" in b, "the resumed checkpoint keeps no averages")

    # Evaluation: the log's last val line scores the EMA, as kgpt eval --weights ema does.
    last_val = [l for l in log.splitlines() if " val_loss:" in l][-1]
    check(last_val.endswith("weights:ema"), f"the last val line: {last_val}")
    logged = float(re.search(r"val_loss:([0-9.]+)", last_val).group(1))
    loss_ema = kgpt_eval(checkpoints[-1], "ema")
    loss_swa = kgpt_eval(checkpoints[-1], "swa")
    loss_live = kgpt_eval(checkpoints[-1], "live")
    check(abs(logged - loss_ema) <= 6e-5, f"the log's val_loss {logged} is not kgpt eval --weights ema's {loss_ema}")
    check(len({loss_ema, loss_swa, loss_live}) == 3, f"ema, swa and live evaluate alike: {loss_ema} {loss_swa} {loss_live}")
    with h5py.File(checkpoints[-1], "r") as f:
        text = f["metadata/deck"][()]
        m = yaml.safe_load(text.decode() if isinstance(text, bytes) else text)["model"]
    settings = golf_settings(m)
    torch.set_default_dtype(torch.float64)
    params = {k: torch.tensor(v, dtype=torch.float64) for k, v in read_group(checkpoints[-1], "average/ema").items()}
    model = FAMILIES["golf"](params, settings)
    x = torch.tensor(val[:VAL_TOKENS + 1], dtype=torch.long)
    with torch.no_grad():
        logits = model.logits(x[:VAL_TOKENS].view(-1, SEQ))
        expected = float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), x[1:].reshape(-1)))
    check(abs(loss_ema - expected) <= 2e-5 * expected, f"eval --weights ema: kgpt {loss_ema}, the reference {expected:.6f}")
    print(f"val_loss live {loss_live:.6f}, ema {loss_ema:.6f} (reference {expected:.6f}), swa {loss_swa:.6f}")

    # Export of the SWA: the small tensors are stored in fp16, so the file holds the SWA rounded.
    out = os.path.join(ROOT, "swa.int8z")
    run([KGPT, "export", checkpoints[-1], "--out", out, "--weights", "swa"])
    inspected = run([KGPT, "inspect", out]).stdout
    check("weights: swa" in inspected, f"inspect of the SWA's artifact: {inspected}")
    swa = read_group(checkpoints[-1], "average/swa")
    norm = np.sqrt(sum(float(np.sum(v.astype(np.float16).astype(np.float64) ** 2)) for k, v in swa.items()
                       if k == "tok_emb.weight"))
    found = re.search(r"tok_emb\.weight \S+ \S+ fp16 norm:([0-9.e+-]+)", inspected)
    check(found is not None and abs(float(found.group(1)) - norm) <= 1e-4 * norm,
          f"the artifact's tok_emb norm {found.group(1) if found else None}, the SWA's {norm:.6g}")

    plan = run([KGPT, "check", os.path.join(full, "deck.yaml"), "--no-data"]).stderr
    check(re.search(r"weight averages .*EMA and SWA", plan) is not None, f"kgpt check's memory plan: {plan}")

    # Refusals.
    r = run([KGPT, "eval", plain_last, "--weights", "ema"], expect=2)
    check(plain_last in r.stderr and "train.ema_decay" in r.stderr, f"--weights ema without an EMA: {r.stderr}")
    r = run([KGPT, "eval", out, "--weights", "ema"], expect=2)
    check("artifact" in r.stderr, f"--weights ema of an artifact: {r.stderr}")
    r = run([KGPT, "eval", checkpoints[-1], "--weights", "emma"], expect=2)
    check("--weights" in r.stderr, f"--weights emma: {r.stderr}")
    r = run([KGPT, "check", deck, "--no-data", "--set", "train.eval_weights=ema"], expect=2)
    check("train.eval_weights" in r.stderr and "train.ema_decay" in r.stderr, f"eval_weights without an EMA: {r.stderr}")
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("weight averages: all checks passed")


main()
