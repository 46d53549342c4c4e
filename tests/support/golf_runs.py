"""What the Python reference tests of small golf runs share: their checks and the commands they run,
the text they train on, start weights they write for model.init_from, and reference_models.py's
settings from a checkpoint's deck."""

import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

from shards import write_shard

failures = []  # every failed check's message: a test goes on after one and ends non-zero at the end


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def runner(root, env):
    """run(args, expect=0): the command in `root` with `env`; the test stops, printing its output,
    when its exit code is not `expect`."""
    def run(args, expect=0):
        r = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != expect:
            print(r.stdout, r.stderr)
            sys.exit(f"{' '.join(args[:4])}: exit code {r.returncode}, want {expect}")
        return r
    return run


def text_tokens(seed, count):
    """Bytes of a repetitive text with some noise, so that a few steps learn something."""
    rng = np.random.default_rng(seed)
    words = [b"the ", b"quick ", b"brown ", b"fox ", b"jumps ", b"over ", b"lazy ", b"dogs. "]
    out = []
    while len(out) < count:
        out += list(words[rng.integers(len(words))])
        if rng.random() < 0.1:
            out.append(int(rng.integers(256)))
    return out[:count]


# The model and data sections of the small golf model several tests train (2 blocks of 32, the
# byte tokenizer), on shards named train_*.bin and val_*.bin beside the deck.
SMALL_GOLF_SECTIONS = """\
model:
  family: golf
  vocab_size: 257
  n_layer: 2
  d_model: 32
  n_head: 2
  n_kv_head: 1
data:
  train_files: train_*.bin
  val_files: val_*.bin
  tokenizer: byte
"""


def fresh_text_shards(root):
    """Empties `root` and writes train and val shards of text_tokens there; returns the train tokens."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    tokens = text_tokens(1, 20000)
    write_shard(os.path.join(root, "train_000000.bin"), tokens)
    write_shard(os.path.join(root, "val_000000.bin"), text_tokens(2, 321))
    return tokens


def write_safetensors(path, tensors):
    """A float32 safetensors file of `tensors` (name -> array), as model.init_from reads it."""
    header, offset, blobs = {}, 0, []
    for name, value in tensors.items():
        data = np.ascontiguousarray(value, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(value.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def start_weights(shapes, seed, scale):
    """Normal weights of standard deviation `scale` for golf's tensors (name -> shape), with the
    residual mixes, scales, skip weights and query gains at golf's initial values."""
    rng = np.random.default_rng(seed)
    start = {name: (rng.standard_normal(shape) * scale).astype(np.float32) for name, shape in shapes.items()}
    for name in start:
        if "resid_mix" in name:
            start[name][0], start[name][1] = 1.0, 0.0
        if name.endswith(("attn_scale", "mlp_scale", "skip_weights", "q_gain")):
            start[name] = np.ones(shapes[name], dtype=np.float32)
    return start


def golf_settings(model):
    """reference_models.py's Golf settings from a checkpoint deck's model section."""
    return {"n_layer": model["n_layer"], "n_head": model["n_head"], "n_kv_head": model["n_kv_head"],
            "rope_base": model["rope_base"], "logit_softcap": model["logit_softcap"],
            "rms_eps": 1.1920928955078125e-07, "parallel_residual_start": model.get("parallel_residual_start", -1),
            "recur_start": model.get("recur_start", -1), "recur_count": model.get("recur_count", 1)}
