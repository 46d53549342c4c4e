#!/usr/bin/python3
"""Describe a kgpt checkpoint: tensors with shapes and norms, optimizer state, training state, metadata.

usage: inspect_checkpoint.py [--json] CKPT

CKPT is a checkpoint file (checkpoints/ckpt_NNNNNNNN.h5) or a run or checkpoints directory, which
stands for its newest checkpoint. Lists every tensor of /params with its shape, dtype, element
count and L2 norm (computed in float64; a tensor holding NaN or Inf is flagged), the tensors and
bytes of each /optim group, whatever /state holds (datasets and attributes), the /metadata
attributes (versions, world size, Slurm ids) and the model family of the stored deck, then the
total parameter count. --json prints all of it, the deck text included, as one JSON object.
Exit code 2 when the file is missing, unreadable or has no /params group.
"""
import argparse
import glob
import json
import math
import os
import sys

import h5py
import numpy as np

from plot_history import InputError, open_h5, parse_deck, read_metadata, to_python


def checkpoint_path(arg):
    """The file itself, or the newest ckpt_*.h5 of a run or checkpoints directory."""
    if not os.path.isdir(arg):
        return arg
    found = sorted(glob.glob(os.path.join(arg, "checkpoints", "ckpt_*.h5")) or glob.glob(os.path.join(arg, "ckpt_*.h5")))
    if not found:
        raise InputError(f"{arg}: no checkpoints/ckpt_*.h5 in this directory")
    # Step numbers are zero-padded to 8 digits, so the last name is the newest step.
    return found[-1]


def datasets(group):
    """[(name relative to the group, dataset)] of every dataset below a group, in file order."""
    found = []
    group.visititems(lambda name, item: found.append((name, item)) if isinstance(item, h5py.Dataset) else None)
    return found


def tensor_entry(name, dataset):
    data = dataset[()].astype(np.float64)
    nonfinite = int(np.count_nonzero(~np.isfinite(data)))
    return {"name": name, "shape": list(dataset.shape), "dtype": str(dataset.dtype), "elements": int(dataset.size),
            "l2_norm": float(np.linalg.norm(data.ravel())), "nonfinite": nonfinite}


def optim_entry(name, item):
    tensors = datasets(item) if isinstance(item, h5py.Group) else [(name, item)]
    return {"tensors": len(tensors), "elements": sum(int(d.size) for _, d in tensors),
            "bytes": sum(int(d.size) * d.dtype.itemsize for _, d in tensors)}


def inspect(path):
    with open_h5(path) as f:
        if "params" not in f or not isinstance(f["params"], h5py.Group):
            raise InputError(f"{path}: no /params group; not a kgpt checkpoint")
        report = {"file": path, "attributes": {k: to_python(f.attrs[k]) for k in f.attrs}}
        report["params"] = [tensor_entry(name, d) for name, d in datasets(f["params"])]
        optim = f["optim"] if "optim" in f else {}
        report["optim"] = {name: optim_entry(name, item) for name, item in optim.items()}
        state = {}
        if "state" in f:
            # Whatever the writer stored, datasets and attributes alike, unknown ones included.
            state.update({name: to_python(d[()]) for name, d in datasets(f["state"])})
            state.update({name: to_python(v) for name, v in f["state"].attrs.items()})
        report["state"] = state
        report["metadata"], report["deck"] = read_metadata(f)
    model = parse_deck(report["deck"]).get("model")
    report["family"] = str(model.get("family", "?")) if isinstance(model, dict) else "?"
    report["total_params"] = sum(t["elements"] for t in report["params"])
    return report


def finite_or_none(value):
    """JSON has no NaN or Infinity; such values become null (the nonfinite counts still say so)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_or_none(v) for v in value]
    return value


def print_text(report):
    print(f"checkpoint: {report['file']}")
    for key, value in report["attributes"].items():
        print(f"  {key}: {value}")
    print("state:")
    for key, value in report["state"].items():
        print(f"  {key:24} {value!r}")
    print("metadata:")
    for key, value in report["metadata"].items():
        print(f"  {key:24} {value}")
    deck = report["deck"]
    print(f"  {'deck':24} {len(deck)} characters, model.family {report['family']}" if deck else f"  {'deck':24} (none)")
    width = max([len(t["name"]) for t in report["params"]] + [4])
    print("params:")
    print(f"  {'name':{width}} {'shape':>14} {'dtype':>8} {'elements':>12} l2_norm")
    for t in report["params"]:
        shape = str(tuple(t["shape"]))
        flag = f"  ({t['nonfinite']} non-finite)" if t["nonfinite"] else ""
        print(f"  {t['name']:{width}} {shape:>14} {t['dtype']:>8} {t['elements']:>12,} {t['l2_norm']!r}{flag}")
    print("optimizer state:")
    if not report["optim"]:
        print("  (none)")
    for name, group in report["optim"].items():
        print(f"  {name:24} {group['tensors']:>5} tensors {group['elements']:>14,} elements {group['bytes']:>14,} bytes")
    print(f"total parameters: {report['total_params']:,} ({report['total_params']}) in {len(report['params'])} tensors")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", metavar="CKPT", help="a checkpoint file, or a run directory for its newest one")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args(argv)
    try:
        report = inspect(checkpoint_path(args.checkpoint))
    except InputError as error:
        print(f"inspect_checkpoint.py: error: {error}", file=sys.stderr)
        return 2
    count = report["attributes"].get("tensor_count")
    if isinstance(count, int) and count != len(report["params"]):
        print(f"inspect_checkpoint.py: warning: {report['file']}: tensor_count attribute says {count}, "
              f"/params has {len(report['params'])}", file=sys.stderr)
    bad = [t["name"] for t in report["params"] if t["nonfinite"]]
    if bad:
        print(f"inspect_checkpoint.py: warning: {report['file']}: non-finite values in {', '.join(bad)}", file=sys.stderr)
    if args.json:
        print(json.dumps(finite_or_none(report), indent=1))
    else:
        print_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
