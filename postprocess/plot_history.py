#!/usr/bin/python3
"""Plot the loss and learning-rate curves of one kgpt run from its history.h5.

usage: plot_history.py [--out PNG] [--x step|tokens] RUN_DIR_OR_HISTORY

Left panel: the train loss of every step, the val loss at each evaluation and val_bpb on a second
y axis; middle (right without tasks): the learning rate of each parameter group, schedule applied;
right, when the run scored multiple-choice tasks (data.task_files): each task's acc and acc_norm.
The title names the run directory and the model family from the resolved deck stored in the file.
Writes <run_dir>/history.png unless --out is given and prints the path written. The file may still
be written by a running job. Exit code 2 when the history file is missing or unreadable.

The readers defined here (read_history, open_h5, flat_deck) are shared with compare_runs.py,
summarize.py and inspect_checkpoint.py.
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np
import yaml

LR_COLUMNS = ("lr_matrix", "lr_scalar", "lr_embedding", "lr_head")


class InputError(Exception):
    """A file that is missing or lacks what a tool needs; the message names the file."""


def open_h5(path):
    """Opens an HDF5 file read-only, as a SWMR reader where possible so a running job's file can be read."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise InputError(f"{path}: not a file")
    try:
        return h5py.File(path, "r", swmr=True)
    except (OSError, ValueError):
        pass
    # Some HDF5 versions refuse a SWMR reader on a file not written in SWMR mode; a plain open works.
    try:
        return h5py.File(path, "r")
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: not a readable HDF5 file ({error})") from None


def to_python(value):
    """An HDF5 attribute or dataset value as plain Python (str, int, float, bool or list)."""
    if isinstance(value, np.ndarray):
        if value.shape != ():
            return [to_python(v) for v in value.tolist()]
        value = value[()]
    if isinstance(value, (bytes, np.bytes_)):
        # Fixed-length strings come back as bytes, possibly NUL-padded.
        return bytes(value).decode("utf-8", errors="replace").rstrip("\0")
    if isinstance(value, np.generic):
        return value.item()
    return value


def read_metadata(f):
    """The /metadata attributes as a dict and the resolved deck text ("" when absent)."""
    if "metadata" not in f:
        return {}, ""
    group = f["metadata"]
    attrs = {key: to_python(group.attrs[key]) for key in group.attrs}
    deck = to_python(group["deck"][()]) if "deck" in group else ""
    return attrs, deck if isinstance(deck, str) else ""


def parse_deck(text):
    """The resolved deck text as nested dicts; {} when it is absent or not YAML."""
    try:
        deck = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return {}
    return deck if isinstance(deck, dict) else {}


def flat_deck(deck, prefix=""):
    """{"section.key": value} for every leaf of the nested deck, in deck order."""
    flat = {}
    for key, value in deck.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_deck(value, name + "."))
        else:
            flat[name] = value
    return flat


def read_columns(group):
    """The 1-D datasets of a group as {name: array} and their units, cut to a common length."""
    columns, units = {}, {}
    for name, item in group.items():
        if isinstance(item, h5py.Dataset) and item.ndim == 1:
            columns[name] = item[()]
            units[name] = to_python(item.attrs.get("units", ""))
    # A SWMR reader can land between the appends of one row's columns: keep only complete rows.
    rows = min((len(c) for c in columns.values()), default=0)
    return {name: c[:rows] for name, c in columns.items()}, units


class History:
    """The contents of one history.h5: train and val columns, units, metadata and the deck."""

    def __init__(self, arg):
        self.path = os.path.join(arg, "history.h5") if os.path.isdir(arg) else arg
        self.run_dir = os.path.dirname(os.path.abspath(self.path))
        self.name = os.path.basename(self.run_dir)
        self.sweep_values = {}
        with open_h5(self.path) as f:
            for needed in ("train/step", "train/loss"):
                if needed not in f:
                    raise InputError(f"{self.path}: no /{needed} dataset; not a kgpt history file")
            self.train, train_units = read_columns(f["train"])
            self.val, val_units = read_columns(f["val"]) if "val" in f else ({}, {})
            # Multiple-choice tasks (data.task_files): rows of (step, task index, acc, acc_norm); the
            # group's attribute names lists the tasks, one a line.
            self.task, _ = read_columns(f["task"]) if "task" in f else ({}, {})
            names = f["task"].attrs.get("names", "") if "task" in f else ""
            names = names.decode() if isinstance(names, bytes) else str(names)
            self.task_names = names.split("\n") if names else []
            self.metadata, self.deck_text = read_metadata(f)
        self.units = {**{f"train/{k}": v for k, v in train_units.items()},
                      **{f"val/{k}": v for k, v in val_units.items()}}
        self.deck = parse_deck(self.deck_text)
        model = self.deck.get("model")
        self.family = str(model.get("family", "?")) if isinstance(model, dict) else "?"

    def column(self, group, name):
        """A column as an array; empty when the file does not have it."""
        return getattr(self, group).get(name, np.array([]))

    def val_x(self, axis, group="val"):
        """The x values of the val (or task) rows: their steps, or the tokens seen at those steps."""
        steps = self.column(group, "step")
        if axis == "step":
            return steps
        train_steps, tokens = self.column("train", "step"), self.column("train", "tokens")
        if not len(tokens):
            return np.full(len(steps), np.nan)
        order = np.argsort(train_steps, kind="stable")
        # Evaluation at step 0 comes before any training token.
        return np.interp(steps, np.concatenate([[0], train_steps[order]]), np.concatenate([[0], tokens[order]]))

    def train_x(self, axis):
        return self.column("train", "step" if axis == "step" else "tokens")


def read_sweep(path):
    """The manifest of a sweep folder written by `kgpt sweep`, or None when `path` is not one."""
    manifest = os.path.join(path, "manifest.json")
    if not (os.path.isdir(path) and os.path.isfile(manifest)):
        return None
    try:
        with open(manifest) as f:
            sweep = json.load(f)
        for point in sweep["points"]:
            point["index"], point["run_dir"], point["overrides"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"{manifest}: not a kgpt sweep manifest ({error})") from None
    return sweep


def load_histories(args):
    """Histories of run directories, history files and sweep folders (every point that has run).

    A sweep's runs are named <sweep>/<index> and carry `sweep_values`: the point's index and the
    values of its swept keys, from manifest.json. Points without a history yet are skipped with a
    warning naming them."""
    histories = []
    for arg in args:
        sweep = read_sweep(arg)
        if sweep is None:
            histories.append(History(arg))
            continue
        for point in sweep["points"]:
            run_dir = os.path.join(arg, point["run_dir"])
            if not os.path.isfile(os.path.join(run_dir, "history.h5")):
                print(f"warning: {arg}: point {point['index']} has no history.h5 yet ({run_dir}); left out",
                      file=sys.stderr)
                continue
            history = History(run_dir)
            history.name = f"{sweep.get('sweep', os.path.basename(arg))}/{os.path.basename(run_dir)}"
            history.sweep_values = {"index": point["index"], **point["overrides"]}
            histories.append(history)
    return histories


def pyplot():
    """matplotlib.pyplot with the headless Agg backend, imported only by the tools that draw."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def axis_label(history, column, fallback):
    units = history.units.get(column, "")
    return f"{fallback} ({units})" if units and units != "1" else fallback


def save(fig, out):
    try:
        fig.savefig(out, dpi=100, bbox_inches="tight")
    except OSError as error:
        raise InputError(f"{out}: cannot write ({error.strerror or error})") from None


def plot_history(history, out, axis):
    plt = pyplot()
    if not len(history.column("train", "step")) and not len(history.column("val", "step")):
        raise InputError(f"{history.path}: no rows in /train or /val yet")
    tasks = len(history.column("task", "step")) > 0
    fig, axes = plt.subplots(1, 3 if tasks else 2, figsize=(19.5 if tasks else 13, 4.8), layout="constrained")
    loss_ax, lr_ax = axes[0], axes[1]
    train_x, val_x = history.train_x(axis), history.val_x(axis)

    loss_ax.plot(train_x, history.column("train", "loss"), lw=1, color="tab:blue", label="train loss")
    if len(history.column("val", "loss")):
        loss_ax.plot(val_x, history.column("val", "loss"), "o-", color="tab:orange", label="val loss")
    loss_ax.set_xlabel(axis)
    loss_ax.set_ylabel(axis_label(history, "train/loss", "loss"))
    loss_ax.grid(alpha=0.3)
    handles, labels = loss_ax.get_legend_handles_labels()
    if len(history.column("val", "bpb")):
        # bpb and nats/token differ in scale, so val_bpb gets its own y axis.
        bpb_ax = loss_ax.twinx()
        bpb_ax.plot(val_x, history.column("val", "bpb"), "s--", color="tab:green", label="val_bpb")
        bpb_ax.set_ylabel(axis_label(history, "val/bpb", "val_bpb"))
        more_handles, more_labels = bpb_ax.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    loss_ax.legend(handles, labels, loc="upper right")
    loss_ax.set_title("loss")

    drawn = False
    for name in LR_COLUMNS:
        if name in history.train:
            lr_ax.plot(train_x, history.train[name], lw=1.2, label=name[len("lr_"):])
            drawn = True
    if drawn:
        lr_ax.legend(loc="best")
    else:
        lr_ax.text(0.5, 0.5, "no learning-rate columns", ha="center", va="center", transform=lr_ax.transAxes)
    lr_ax.set_xlabel(axis)
    lr_ax.set_ylabel("learning rate")
    lr_ax.grid(alpha=0.3)
    lr_ax.set_title("learning rate (schedule applied)")

    if tasks:
        # Each task's acc and acc_norm (data.task_files), over the steps they were scored at.
        task_ax, task_x, index = axes[2], history.val_x(axis, "task"), history.column("task", "task").astype(int)
        for i in sorted(set(index.tolist())):
            name = history.task_names[i] if 0 <= i < len(history.task_names) else f"task {i}"
            rows = index == i
            line, = task_ax.plot(task_x[rows], history.column("task", "acc")[rows], "o-", label=f"{name} acc")
            task_ax.plot(task_x[rows], history.column("task", "acc_norm")[rows], "s--", color=line.get_color(),
                         label=f"{name} acc_norm")
        task_ax.set_xlabel(axis)
        task_ax.set_ylabel("share of examples right")
        task_ax.grid(alpha=0.3)
        task_ax.legend(loc="best")
        task_ax.set_title("multiple-choice tasks")

    steps = history.column("train", "step")
    last = f", {int(steps[-1])} steps" if len(steps) else ""
    world = history.metadata.get("world_size")
    ranks = f", {world} ranks" if world is not None else ""
    fig.suptitle(f"{history.name}: {history.family} model{last}{ranks}")
    save(fig, out)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", metavar="RUN_DIR_OR_HISTORY", help="a run directory or its history.h5")
    parser.add_argument("--out", metavar="PNG", help="image to write (default: <run_dir>/history.png)")
    parser.add_argument("--x", choices=("step", "tokens"), default="step", help="x axis (default: step)")
    args = parser.parse_args(argv)
    try:
        history = History(args.run)
        out = args.out or os.path.join(history.run_dir, "history.png")
        plot_history(history, out, args.x)
    except InputError as error:
        print(f"plot_history.py: error: {error}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
