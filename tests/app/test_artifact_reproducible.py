#!/usr/bin/python3
"""The same deck and weights export to the same artifact bytes, however and wherever the run was
started (parameter-golf's issue 1978: +-5 KB between identical exports).

usage: test_artifact_reproducible.py KGPT SOURCE_DIR WORKDIR

A small golf deck with the records' partial RoPE, LN scale, XSA and output gate trains 4 steps twice: from
deck.yaml, and from a copy under another name with an override that sets a key to its default.
Checks:
- both checkpoints hold the same weights (h5py), and their exports (brotli, 6/5-bit rows) are the same
  bytes, as are two exports of one checkpoint;
- the run directory copied elsewhere and exported from another working directory: the same bytes;
- the artifact stores the deck's values without comments (no path, override or world size) and
  relative paths: the checkpoint's to its run, the run's to the artifact's folder;
- kgpt eval of the copy records its round trip in the copy's artifact.yaml, not the original's;
- the run resumed from its step-2 checkpoint writes the step-4 checkpoint bit for bit.
"""

import os
import shutil
import struct
import sys

import brotli
import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from golf_runs import SMALL_GOLF_SECTIONS, check, failures, fresh_text_shards, runner  # noqa: E402

KGPT, SOURCE_DIR, WORKDIR = sys.argv[1:4]
ROOT = os.path.join(WORKDIR, "artifact_reproducible")
run = runner(ROOT, dict(os.environ, OPENBLAS_NUM_THREADS="1"))


def payload(path):
    whole = open(path, "rb").read()
    check(struct.unpack("<I", whole[12:16])[0] == 2, f"{path}: not brotli")
    return brotli.decompress(whole[32:])


def main():
    fresh_text_shards(ROOT)
    model = SMALL_GOLF_SECTIONS.replace("  n_kv_head: 1\n", "  n_kv_head: 1\n  rope_dims: 8\n  ln_scale: true\n  xsa_last_n: 1\n  attn_gate_width: 4\n")
    text = (model + "train:\n  seq_len: 16\n  global_batch_tokens: 64\n  accum_total: 1\n"
            "  iterations: 4\n  eval_every: 0\n  val_tokens: 128\nrun:\n  checkpoint_every: 2\n"
            "export:\n  compression: brotli\n  attention_bits: 6\n  mlp_bits: 5\n  keep_float_max: 256\n")
    for name in ("deck.yaml", "other_name.yaml"):
        open(os.path.join(ROOT, name), "w").write(text)
    run([KGPT, "train", "deck.yaml", "--run-dir", "first"])
    run([KGPT, "train", "other_name.yaml", "--run-dir", "second", "--set", "model.mlp_mult=2"])
    checkpoint = os.path.join("checkpoints", "ckpt_00000004.h5")
    with h5py.File(os.path.join(ROOT, "first", checkpoint), "r") as a, \
            h5py.File(os.path.join(ROOT, "second", checkpoint), "r") as b:
        check(all(np.array_equal(a["params"][k][()], b["params"][k][()]) for k in a["params"]),
              "the two runs' weights differ")
    files = {}
    for name, run_dir, cwd in [("first", "first", ROOT), ("again", "first", ROOT), ("second", "second", ROOT)]:
        out = os.path.join(run_dir, f"{name}.kgptz")
        run([KGPT, "export", os.path.join(run_dir, checkpoint), "--out", out])
        files[name] = open(os.path.join(ROOT, out), "rb").read()
    elsewhere = os.path.join(WORKDIR, "artifact_reproducible_moved")
    shutil.rmtree(elsewhere, ignore_errors=True)
    os.makedirs(elsewhere)
    shutil.copytree(os.path.join(ROOT, "first"), os.path.join(elsewhere, "first"))
    for name in ("first.kgptz", "again.kgptz"):
        os.remove(os.path.join(elsewhere, "first", name))
    moved = runner(elsewhere, dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    moved([KGPT, "export", os.path.join("first", checkpoint), "--out", os.path.join("first", "first.kgptz")])
    files["moved"] = open(os.path.join(elsewhere, "first", "first.kgptz"), "rb").read()
    sizes = {k: len(v) for k, v in files.items()}
    check(len(set(files.values())) == 1, f"exports differ: {sizes}")
    print(f"four exports of {sizes['first']} bytes each: identical" if len(set(files.values())) == 1 else sizes)

    raw = payload(os.path.join(ROOT, "first", "first.kgptz"))
    check(b"#" not in raw[:raw.find(b"\nexport:")] and b"other_name" not in raw and b"deck.yaml" not in raw and
          b"world_size" not in raw, "the stored deck carries comments, a path or the world size")
    check(ROOT.encode() not in raw and elsewhere.encode() not in raw, "the artifact holds an absolute path")
    check(b"checkpoints/ckpt_00000004.h5" in raw, "the checkpoint's path relative to its run is not stored")

    # The copy's round trip goes to the copy's record.
    moved([KGPT, "eval", os.path.join("first", "first.kgptz"), "--set", f"data.val_files={ROOT}/val_*.bin"])
    copy_record = open(os.path.join(elsewhere, "first", "artifact.yaml")).read()
    original = open(os.path.join(ROOT, "first", "artifact.yaml")).read()
    check("roundtrip_val_bpb" in copy_record, f"the copy's artifact.yaml has no round trip: {copy_record}")
    check("roundtrip_val_bpb" not in original, "the original run's artifact.yaml got the copy's round trip")
    # Resumed from step 2: the step-4 checkpoint bit for bit.
    resumed = os.path.join(ROOT, "resumed")
    shutil.copytree(os.path.join(ROOT, "first"), resumed)
    os.remove(os.path.join(resumed, checkpoint))
    run([KGPT, "train", "deck.yaml", "--run-dir", "resumed", "--resume"])
    with h5py.File(os.path.join(ROOT, "first", checkpoint), "r") as a, h5py.File(os.path.join(resumed, checkpoint), "r") as b:
        names = []
        a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) and n.startswith(("params", "optim")) else None)
        differing = [n for n in names if n not in b or not np.array_equal(a[n][()], b[n][()])]
        check(names and not differing, f"resumed at step 2, the step-4 checkpoint differs in {differing[:5]} of {len(names)}")
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


if __name__ == "__main__":
    main()
