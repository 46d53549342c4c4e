#!/usr/bin/python3
"""Tabulate the outcome of kgpt runs: one row per run from its history.h5.

usage: summarize.py [--csv FILE] [--markdown FILE] RUN...

Each RUN is a run directory, its history.h5, or a sweep folder written by `kgpt sweep` (every point
that has a history, named <sweep>/<index>; the table then also has the point's index and one column
per swept key, after run). Columns: run (directory name), family, steps and
tokens (of the last train row), final train loss, final val loss, best val loss and its step, final
and best val_bpb, and the median of tokens/s over the train rows. When a run has an exported
artifact (`kgpt export` writes <run>/artifact.yaml, `kgpt eval ARTIFACT` adds its round trip), the
table also has artifact_bytes, artifact_step and roundtrip_val_bpb. Numbers are the values stored in
the file, written in full (shortest round-trip form), so they compare equal to what h5py reads;
an empty cell means the run has no such rows yet. Prints a Markdown table; --csv and --markdown
also write it to files. Exit code 2 when a history file is missing or unreadable.
"""
import argparse
import math
import os
import sys

import numpy as np
import pandas as pd

from plot_history import InputError, load_histories

COLUMNS = ["run", "family", "steps", "tokens", "final_train_loss", "final_val_loss", "best_val_loss",
           "best_val_step", "final_val_bpb", "best_val_bpb", "median_tokens_per_s"]
ARTIFACT_COLUMNS = ["artifact_bytes", "artifact_step", "roundtrip_val_loss", "roundtrip_val_bpb"]
INT_COLUMNS = ["steps", "tokens", "best_val_step", "artifact_bytes", "artifact_step"]


def artifact_record(run_dir):
    """The flat 'key: value' fields of <run_dir>/artifact.yaml, or {} when there is none."""
    path = os.path.join(run_dir, "artifact.yaml")
    if not os.path.isfile(path):
        return {}
    fields = {}
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("#") or ": " not in line:
                    continue
                key, value = line.rstrip("\n").split(": ", 1)
                fields[key] = value
        return {"artifact_bytes": int(fields["bytes"]), "artifact_step": int(fields["step"]),
                "roundtrip_val_loss": float(fields["roundtrip_val_loss"]) if "roundtrip_val_loss" in fields else None,
                "roundtrip_val_bpb": float(fields["roundtrip_val_bpb"]) if "roundtrip_val_bpb" in fields else None}
    except (OSError, KeyError, ValueError) as error:
        raise InputError(f"{path}: unreadable artifact record ({error})") from None


def last(values):
    return values[-1].item() if len(values) else None


def best(values):
    """Index of the smallest value, skipping NaN (a diverged evaluation); None when there is none."""
    if not len(values) or np.all(np.isnan(values)):
        return None
    return int(np.nanargmin(values))


def summary_row(history):
    return {**history.sweep_values, **metrics_row(history), **artifact_record(history.run_dir)}


def metrics_row(history):
    train_step = history.column("train", "step")
    val_loss, val_bpb = history.column("val", "loss"), history.column("val", "bpb")
    i_loss, i_bpb = best(val_loss), best(val_bpb)
    rates = history.column("train", "tokens_per_s")
    return {
        "run": history.name,
        "family": history.family,
        "steps": last(train_step),
        "tokens": last(history.column("train", "tokens")),
        "final_train_loss": last(history.column("train", "loss")),
        "final_val_loss": last(val_loss),
        "best_val_loss": val_loss[i_loss].item() if i_loss is not None else None,
        "best_val_step": history.column("val", "step")[i_loss].item() if i_loss is not None else None,
        "final_val_bpb": last(val_bpb),
        "best_val_bpb": val_bpb[i_bpb].item() if i_bpb is not None else None,
        "median_tokens_per_s": float(np.median(rates)) if len(rates) else None,
    }


def columns_for(histories):
    """COLUMNS, with the swept keys of any sweep runs (index first) after run, and the artifact
    columns when a run has an artifact record."""
    swept = []
    for history in histories:
        swept.extend(k for k in history.sweep_values if k not in swept)
    artifacts = any(os.path.isfile(os.path.join(h.run_dir, "artifact.yaml")) for h in histories)
    return COLUMNS[:1] + swept + COLUMNS[1:] + (ARTIFACT_COLUMNS if artifacts else [])


def table(histories):
    frame = pd.DataFrame([summary_row(h) for h in histories], columns=columns_for(histories))
    # Nullable integers, so a run without val rows does not turn steps into floats.
    for name in [c for c in INT_COLUMNS if c in frame] + (["index"] if "index" in frame else []):
        frame[name] = frame[name].astype("Int64")
    return frame


def cell(value):
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def markdown(frame):
    columns = list(frame.columns)
    rows = [columns, ["---"] * len(columns)]
    rows += [[cell(v.item() if isinstance(v, np.generic) else v) for v in record]
             for record in frame.itertuples(index=False)]
    return "".join("| " + " | ".join(row) + " |\n" for row in rows)


def write(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as error:
        raise InputError(f"{path}: cannot write ({error.strerror or error})") from None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories or their history.h5 files")
    parser.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
    parser.add_argument("--markdown", metavar="FILE", help="also write the Markdown table to FILE")
    args = parser.parse_args(argv)
    try:
        frame = table(load_histories(args.runs))
        text = markdown(frame)
        sys.stdout.write(text)
        if args.csv:
            # repr keeps every digit: the CSV must read back equal to the HDF5 values.
            write(args.csv, frame.to_csv(index=False, float_format=lambda v: repr(float(v))))
            print(f"wrote {args.csv}")
        if args.markdown:
            write(args.markdown, text)
            print(f"wrote {args.markdown}")
    except InputError as error:
        print(f"summarize.py: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
