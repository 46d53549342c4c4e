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
- a stride above seq_len is refused with exit code 2, naming train.eval_stride;
- with train.eval_isolate_documents, on a val split of documents (each after the byte tokenizer's
  boundary 256, some shorter than seq_len, some longer, one at the split's end): kgpt's val_loss
  equals the reference's, which feeds each document alone (a short one as a sequence of its own
  length; a long one through the stride's windows inside it), back to back and with stride 5, on 1
  and 3 ranks; every token is scored once (val_bpb / val_loss as without isolation), and the figure
  differs from the one without isolation.
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
from golf_runs import check, failures, golf_settings, runner, text_tokens  # noqa: E402
from shards import write_shard  # noqa: E402

KGPT, MPIEXEC, SOURCE_DIR, WORKDIR = sys.argv[1:5]
ROOT = os.path.join(WORKDIR, "sliding_eval")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
ENV.pop("SLURM_NTASKS", None)
SEQ, VAL_TOKENS = 16, 320
BOUNDARY = 256  # the byte tokenizer's document boundary
torch.set_default_dtype(torch.float64)
run = runner(ROOT, ENV)


def kgpt_eval(checkpoint, stride, ranks=1, extra=()):
    args = [KGPT, "eval", checkpoint, "--set", f"train.eval_stride={stride}"] + list(extra)
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


def reference_document_loss(model, tokens, stride):
    """The mean loss with every document on its own: a document starts at the split's start and at
    every boundary token (its first input); one of up to SEQ positions is scored as a sequence of
    its own length, a longer one by reference_loss's windows inside it."""
    targets = len(tokens) - 1
    starts = [0] + [p for p in range(1, targets) if tokens[p] == BOUNDARY]
    ends = starts[1:] + [targets]
    total, count = 0.0, 0
    x = torch.tensor(tokens, dtype=torch.long)
    for begin, end in zip(starts, ends):
        if end - begin <= SEQ:
            with torch.no_grad():
                logits = model.logits(x[begin:end][None])[0]
                total += float(F.cross_entropy(logits, x[begin + 1:end + 1], reduction="sum"))
            count += end - begin
        else:
            total += reference_loss(model, tokens[begin:end + 1], stride) * (end - begin)
            count += end - begin
    if count != targets:
        sys.exit(f"the document reference scored {count} positions of {targets}")
    return total / count


def document_tokens(count):
    """Text in documents of 3 to 40 tokens, each after the boundary token; the split starts inside a
    document and ends inside one."""
    rng = np.random.default_rng(5)
    text = text_tokens(6, count)
    out = text[:7]
    while len(out) < count:
        length = int(rng.choice([3, 9, SEQ - 1, SEQ, SEQ + 1, 23, 40]))
        out += [BOUNDARY] + text[len(out):len(out) + length]
    return out[:count]


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
    # Documents apart, on a split of documents.
    docs = document_tokens(VAL_TOKENS + 1)
    write_shard(os.path.join(ROOT, "docs_000000.bin"), docs)
    isolated = ["--set", "data.val_files=docs_*.bin", "--set", "train.eval_isolate_documents=true"]
    together = ["--set", "data.val_files=docs_*.bin"]
    for stride in (0, 5):
        loss, bpb, count = kgpt_eval(checkpoint, stride, extra=isolated)
        expected = reference_document_loss(model, docs, stride)
        check(count == VAL_TOKENS, f"documents apart, stride {stride}: val_tokens {count}, want {VAL_TOKENS}")
        check(abs(loss - expected) <= 2e-5 * expected,
              f"documents apart, stride {stride}: kgpt val_loss {loss}, the PyTorch reference {expected:.6f}")
        print(f"documents apart, stride {stride}: kgpt val_loss {loss:.6f} val_bpb {bpb:.6f}, reference {expected:.6f}")
        plain_loss, plain_bpb, _ = kgpt_eval(checkpoint, stride, extra=together)
        check(abs(bpb / loss - plain_bpb / plain_loss) <= 1e-5 * plain_bpb / plain_loss,
              f"documents apart, stride {stride}: val_bpb / val_loss {bpb / loss}, without isolation "
              f"{plain_bpb / plain_loss}")
        check(abs(loss - plain_loss) > 1e-4, f"documents apart, stride {stride}: {loss} equals the figure without "
              f"isolation {plain_loss}")
        ranked = kgpt_eval(checkpoint, stride, 3, extra=isolated)
        check(abs(ranked[0] - loss) <= 2e-6 and abs(ranked[1] - bpb) <= 2e-6,
              f"documents apart, 3 ranks, stride {stride}: {ranked[:2]}, one rank {loss} {bpb}")

    r = run([KGPT, "eval", checkpoint, "--set", f"train.eval_stride={SEQ + 1}"], expect=2)
    check("train.eval_stride" in r.stderr and "train.seq_len" in r.stderr,
          f"a stride above seq_len: stderr does not name train.eval_stride and train.seq_len: {r.stderr}")
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("sliding-window evaluation: all checks passed")


main()
