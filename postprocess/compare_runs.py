#!/usr/bin/python3
"""Plot one metric of several kgpt runs on one figure, each labelled by what differs in its deck.

usage: compare_runs.py [--out PNG] [--metric val_loss|train_loss|val_bpb] [--x step|tokens] RUN...

Each RUN is a run directory, its history.h5, or a sweep folder written by `kgpt sweep` (each of its
points that has a history). A run's label lists the resolved-deck keys whose
values differ between the runs given, e.g. "optim.matrix_lr=0.02, train.seq_len=256" (and the
world size when that differs); keys equal in all runs are left out. run.name and run.out_dir only
name the run, so they are not used; when nothing else differs the label is the run directory name.
Prints one "label: RUN_DIR: LABEL" line per run, then for every run after the first one line
"difference: RUN_DIR: largest relative difference from FIRST_DIR over N common steps: D" (the
metric at the steps both have; a run checked against a reference, such as one rank against two
nodes), and the path written (default compare_METRIC.png).
Exit code 2 when a history file is missing or unreadable, or no run has rows of the metric.
"""
import argparse
import sys

import numpy as np

from plot_history import InputError, flat_deck, load_histories, pyplot, save

METRICS = {"val_loss": ("val", "loss"), "train_loss": ("train", "loss"), "val_bpb": ("val", "bpb")}
# Keys that name or place a run rather than change what it computes.
NAMING_KEYS = {"run.name", "run.out_dir", "run.run_dir"}
UNSET = object()


def show(value):
    """A deck value written as in the YAML deck."""
    if value is UNSET:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if value == "":
        return '""'
    return str(value)


def run_labels(histories):
    """One label per run from the deck keys (and world size) whose values differ between the runs."""
    settings = []
    for history in histories:
        keys = flat_deck(history.deck)
        # The world size is not a deck key but changes the batch split, so it can tell runs apart too.
        if "world_size" in history.metadata:
            keys["world_size"] = history.metadata["world_size"]
        settings.append(keys)
    order = []
    for keys in settings:
        order.extend(k for k in keys if k not in order)
    differing = [k for k in order if len({show(s.get(k, UNSET)) for s in settings}) > 1]
    telling = [k for k in differing if k not in NAMING_KEYS]
    if not telling:
        labels = [h.name for h in histories]
    else:
        labels = [", ".join(f"{k}={show(s.get(k, UNSET))}" for k in telling) for s in settings]
    # Runs with the same settings (repeats, or only the name differs) keep apart by directory name.
    return [f"{label} [{history.name}]" if labels.count(label) > 1 and label != history.name else label
            for label, history in zip(labels, histories)]


def largest_relative_difference(history, reference, group, column):
    """max |v - r| / |r| over the steps both histories have rows of (None when they share none)."""
    steps, values = history.column(group, "step"), history.column(group, column)
    ref_steps, ref_values = reference.column(group, "step"), reference.column(group, column)
    common, mine, theirs = np.intersect1d(steps, ref_steps, return_indices=True)
    if not len(common):
        return None, 0
    a, b = values[mine], ref_values[theirs]
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), np.finfo(float).tiny))), len(common)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories or their history.h5 files")
    parser.add_argument("--out", metavar="PNG", help="image to write (default: compare_METRIC.png here)")
    parser.add_argument("--metric", choices=sorted(METRICS), default="val_loss", help="what to plot (default: val_loss)")
    parser.add_argument("--x", choices=("step", "tokens"), default="step", help="x axis (default: step)")
    args = parser.parse_args(argv)
    out = args.out or f"compare_{args.metric}.png"
    group, column = METRICS[args.metric]
    try:
        histories = load_histories(args.runs)
        labels = run_labels(histories)
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(10, 5.5), layout="constrained")
        plotted = 0
        for history, label in zip(histories, labels):
            print(f"label: {history.run_dir}: {label}")
            values = history.column(group, column)
            if not len(values):
                print(f"compare_runs.py: warning: {history.path}: no /{group}/{column} rows; not plotted",
                      file=sys.stderr)
                continue
            x = history.train_x(args.x) if group == "train" else history.val_x(args.x)
            style = "-" if group == "train" else "o-"
            ax.plot(x, values, style, lw=1.2, markersize=4, label=label)
            plotted += 1
        if not plotted:
            raise InputError(f"no run has /{group}/{column} rows: {', '.join(h.path for h in histories)}")
        for history in histories[1:]:
            difference, steps = largest_relative_difference(history, histories[0], group, column)
            shown = "no common steps" if difference is None else f"{difference:.2e}"
            print(f"difference: {history.run_dir}: largest relative difference from {histories[0].run_dir} over "
                  f"{steps} common steps: {shown}")
        units = next((h.units.get(f"{group}/{column}") for h in histories if h.units.get(f"{group}/{column}")), "")
        ax.set_ylabel(f"{args.metric} ({units})" if units else args.metric)
        ax.set_xlabel(args.x)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="best")
        families = sorted({h.family for h in histories})
        ax.set_title(f"{args.metric} of {len(histories)} runs ({', '.join(families)})")
        save(fig, out)
    except InputError as error:
        print(f"compare_runs.py: error: {error}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
