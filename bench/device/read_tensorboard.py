#!/usr/bin/env python3
"""TensorBoard's own EventAccumulator over kgpt run directories, against their history.h5.

usage: read_tensorboard.py RUN_DIR...

For each run: every train/ tag at every step, val/loss and val/bpb must equal history.h5's columns
of the same names as float32, each step once; prints one line per run with the tags and values
compared, and mfu's last value where the run has it (bf16 decks on a GPU). Exit code 1 on any
difference, 2 where TensorBoard is not installed.
"""
import os
import sys

import h5py
import numpy as np

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError:
    sys.exit(print("read_tensorboard: TensorBoard is not installed") or 2)

failures = 0
for run_dir in sys.argv[1:]:
    accumulator = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    with h5py.File(os.path.join(run_dir, "history.h5"), "r") as h:
        history = {f"{group}/{name}": h[group][name][()] for group in ("train", "val") for name in h[group].keys()}
    compared, wrong = 0, []
    tags = accumulator.Tags()["scalars"]
    for tag in tags:
        if not tag.startswith(("train/", "val/")):
            continue
        group = tag.split("/")[0]
        steps = [int(s) for s in history[f"{group}/step"]]
        events = accumulator.Scalars(tag)
        if [e.step for e in events] != steps:
            wrong.append(f"{tag}: steps {[e.step for e in events]} against {steps}")
            continue
        for event, value in zip(events, history[tag]):
            compared += 1
            if np.float32(event.value).tobytes() != np.float32(value).tobytes() and not (
                    np.isnan(event.value) and np.isnan(value)):
                wrong.append(f"{tag} at step {event.step}: {event.value} against {value}")
    mfu = f", last mfu {accumulator.Scalars('train/mfu')[-1].value:.4f}" if "train/mfu" in tags else ""
    print(f"tensorboard {os.path.basename(run_dir)}: EventAccumulator read {len(tags)} tags, "
          f"{compared} values equal history.h5's, {len(wrong)} differ{mfu}")
    for line in wrong[:10]:
        print("  " + line)
    failures += bool(wrong) or compared == 0
sys.exit(1 if failures else 0)
