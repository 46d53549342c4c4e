#!/usr/bin/python3
"""Models in and out: `kgpt export --format hf` and `model.init_from`, checked against files and a
model written here, independently of kgpt.

usage: test_hf_interop.py KGPT SOURCE_DIR WORKDIR REFERENCE_DUMP

- the families below are exactly those the registry gives a Hugging Face form
  (REFERENCE_DUMP --hf-families): a family added with one and without its entry here fails, by name;
- gpt2 (tied) and llama (untied, GQA) models trained for 6 steps on the embedded default's data are
  exported; model.safetensors, read here with json + numpy from the published format, holds every
  checkpoint tensor exactly (GPT-2's Conv1D weights transposed), 8-byte aligned data, the config.json
  keys transformers reads, and a bf16 export holds each value rounded to nearest even;
- the independent PyTorch models of tests/reference/reference_models.py, built from the exported
  files alone (Conv1D read as (in, out)), give the val loss `kgpt eval` gives for the checkpoint
  (1e-5 relative, fp32);
- `model.init_from` of the export evaluates at step 0 to the checkpoint's val loss;
- a file written here (GPT-2's own names without "transformer.", one F16 and one BF16 tensor, the
  old causal-mask buffer) loads: kgpt's step-0 val loss equals the PyTorch model's on the same weights;
  at half the sequence length it loads the position table's first rows, with the same agreement, and
  at twice the length it is refused;
- bad files (truncated, a header that lies about offsets or sizes, an unknown dtype, a missing or
  misshapen tensor, not safetensors, a huge header length) and bad exports (golf, a softcapped model,
  a model that repeats a block, an existing folder) end with exit 2 and a message naming the file and the tensor or key, and
  leave nothing behind.
"""

import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import h5py
import numpy as np
import torch

KGPT, SOURCE_DIR, WORKDIR, REFERENCE_DUMP = sys.argv[1:5]
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "reference"))
import reference_models  # noqa: E402

ROOT = os.path.join(WORKDIR, "hf_interop")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")
SEQ, VAL_TOKENS = 128, 4096
COMMON = ["train.iterations=6", "train.eval_every=6", "run.checkpoint_every=6", "train.log_every=3",
          f"train.val_tokens={VAL_TOKENS}", "model.logit_softcap=0"]
FAMILIES = {
    "gpt2": ["model.family=gpt2", "model.n_kv_head=4", "optim.matrix_lr=0.003", "optim.embed_lr=0.003",
             "optim.scalar_lr=0.003"],
    "llama": ["model.family=llama", "model.n_kv_head=2", "model.tie_embeddings=false", "optim.matrix_lr=0.003",
              "optim.embed_lr=0.003", "optim.scalar_lr=0.003", "optim.head_lr=0.003"],
}
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def kgpt(*args):
    return subprocess.run([KGPT, *args], cwd=SOURCE_DIR, env=ENV, capture_output=True, text=True, timeout=600)


def with_sets(overrides):
    return [a for o in overrides for a in ("--set", o)]


def read_safetensors(path):
    """The published format: u64 little-endian header length, a JSON header, then the data."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        chunk = np.frombuffer(data[begin:end], dtype=np.uint16 if entry["dtype"] in ("BF16", "F16") else "<f4")
        if entry["dtype"] == "BF16":
            chunk = (chunk.astype(np.uint32) << 16).view(np.float32)
        elif entry["dtype"] == "F16":
            chunk = chunk.view("<f2").astype(np.float32)
        tensors[name] = chunk.reshape(entry["shape"])
    return header, n, tensors


def write_safetensors(path, tensors, dtypes=None, header_patch=None):
    dtypes = dtypes or {}
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, value in tensors.items():
        dtype = dtypes.get(name, "F32")
        if dtype == "F32":
            blob = np.ascontiguousarray(value, dtype="<f4").tobytes()
        elif dtype == "F16":
            blob = np.ascontiguousarray(value, dtype="<f2").tobytes()
        else:  # BF16: the upper half of the float's bits (these values are exact in bf16)
            blob = (np.ascontiguousarray(value, dtype="<f4").view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(value.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if header_patch:
        header_patch(header)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def bf16_round(values):
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def val_tokens(deck_val_glob, seq=SEQ):
    tokens = np.concatenate([np.fromfile(p, dtype="<u2", offset=1024) for p in sorted(glob.glob(deck_val_glob))])
    usable = min((len(tokens) - 1) // seq * seq, VAL_TOKENS // seq * seq)
    return torch.tensor(tokens[:usable + 1].astype(np.int64))


def reference_loss(family, config, params, seq=SEQ):
    torch_params = {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()}
    if family == "gpt2":
        model = reference_models.Gpt2(torch_params, config["n_layer"], config["n_head"], 0.0,
                                      config["layer_norm_epsilon"])
    else:
        model = reference_models.Llama(torch_params, config["num_hidden_layers"], config["num_attention_heads"],
                                       config["num_key_value_heads"], config["rope_theta"], 0.0,
                                       config["rms_norm_eps"])
    tokens = val_tokens(os.path.join(SOURCE_DIR, "data/tiny_cpu/fortunes_val_*.bin"), seq)
    n = (len(tokens) - 1) // seq
    inputs, targets = tokens[:n * seq].view(n, seq), tokens[1:n * seq + 1].view(n, seq)
    with torch.no_grad():
        loss, _ = model(inputs, targets)
    return float(loss)


def kgpt_params_from_hf(family, tensors, conv1d):
    """transformers' files as the reference models name them: GPT-2's Conv1D weights back to (out, in)."""
    out = {}
    for name, value in tensors.items():
        if family == "gpt2" and not name.startswith(("transformer.", "lm_head.")):
            name = "transformer." + name
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        out[name] = value.T if name in conv1d else value
    return out


def step0_val_loss(run_dir, overrides):
    r = kgpt("train", "inputs/tiny_cpu.yaml", "--run-dir", run_dir,
             *with_sets(overrides + ["train.iterations=1", "train.eval_every=1", "run.checkpoint_every=0"]))
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(f"{run_dir}: kgpt train failed ({r.returncode})")
    with h5py.File(os.path.join(run_dir, "history.h5"), "r") as f:
        return float(f["val"]["loss"][0]), r.stdout  # in full: the log line has 4 decimals


def expect_refused(args, needles, what, leaves=None):
    r = kgpt(*args)
    check(r.returncode == 2, f"{what}: exit code {r.returncode}, want 2 ({r.stderr.strip()[:300]})")
    for needle in needles:
        check(needle in r.stderr, f"{what}: the message does not name {needle!r}: {r.stderr.strip()[:400]}")
    if leaves:
        check(not os.path.exists(leaves), f"{what}: {leaves} was written")


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    exportable = subprocess.run([REFERENCE_DUMP, "--hf-families"], check=True, capture_output=True, text=True,
                                timeout=60).stdout.split()
    check(bool(exportable), f"{REFERENCE_DUMP} --hf-families listed no family")
    for family in exportable:
        check(family in FAMILIES, f"family {family} has a Hugging Face form but no entry in FAMILIES of "
              "tests/io/test_hf_interop.py: add its deck overrides there")
    for family in FAMILIES:
        check(family in exportable, f"FAMILIES of tests/io/test_hf_interop.py names {family}, which the registry "
              "gives no Hugging Face form")
    exported = {}
    for family, overrides in FAMILIES.items():
        run_dir = os.path.join(ROOT, family)
        r = kgpt("train", "inputs/tiny_cpu.yaml", "--run-dir", run_dir, *with_sets(COMMON + overrides))
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            sys.exit(f"{family}: kgpt train failed")
        ckpt = os.path.join(run_dir, "checkpoints", "ckpt_00000006.h5")
        out = os.path.join(ROOT, f"{family}_hf")
        r = kgpt("export", ckpt, "--format", "hf", "--out", out)
        check(r.returncode == 0, f"{family}: export failed: {r.stderr}")
        header, header_bytes, tensors = read_safetensors(os.path.join(out, "model.safetensors"))
        check((8 + header_bytes) % 8 == 0, f"{family}: the data does not start 8-byte aligned")
        check(header["__metadata__"].get("format") == "pt", f"{family}: metadata format is not 'pt'")
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)
        with h5py.File(ckpt, "r") as f:
            params = {name: f["params"][name][()] for name in f["params"].keys()} if "params" in f else {}
            if not params:
                f.visititems(lambda n, item: params.__setitem__(n[len("params/"):], item[()])
                             if isinstance(item, h5py.Dataset) and n.startswith("params/") else None)
        conv1d = {n for n in params if family == "gpt2" and re.search(r"\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$", n)}
        check(set(tensors) == set(params), f"{family}: exported names {sorted(set(tensors) ^ set(params))[:6]} differ")
        for name, value in params.items():
            want = value.T if name in conv1d else value
            check(name in tensors and tensors[name].shape == want.shape and np.array_equal(tensors[name], want),
                  f"{family}: {name} differs from the checkpoint")
        if family == "gpt2":
            check(config["architectures"] == ["GPT2LMHeadModel"] and config["n_embd"] == 128 and
                  config["n_positions"] == SEQ and config["activation_function"] == "gelu_new" and
                  config["tie_word_embeddings"] is True, f"gpt2: config.json {config}")
        else:
            check(config["architectures"] == ["LlamaForCausalLM"] and config["num_key_value_heads"] == 2 and
                  config["hidden_size"] == 128 and config["tie_word_embeddings"] is False and
                  "lm_head.weight" in tensors, f"llama: config.json {config}")
        # bf16: each value rounded to nearest even.
        out16 = os.path.join(ROOT, f"{family}_hf_bf16")
        r = kgpt("export", ckpt, "--format", "hf", "--out", out16, "--dtype", "bf16")
        _, _, tensors16 = read_safetensors(os.path.join(out16, "model.safetensors"))
        with open(os.path.join(out16, "config.json")) as f:
            check(json.load(f)["torch_dtype"] == "bfloat16", f"{family}: bf16 export's torch_dtype")
        check(all(np.array_equal(tensors16[n], bf16_round(tensors[n])) for n in tensors),
              f"{family}: the bf16 export is not the fp32 values rounded to nearest even")

        # The int8 artifact of a family with learned positions (built at the deck's sequence length).
        r = kgpt("export", ckpt, "--out", os.path.join(ROOT, f"{family}.int8z"))
        check(r.returncode == 0, f"{family}: the int8 artifact export failed: {r.stderr.strip()[:300]}")
        # The independent model from the exported files against kgpt eval of the checkpoint.
        r = kgpt("eval", ckpt, "--set", f"train.val_tokens={VAL_TOKENS}")
        kgpt_loss = float(re.search(r"val_loss:([0-9.]+)", r.stdout).group(1))
        ref_loss = reference_loss(family, config, kgpt_params_from_hf(family, tensors, conv1d))
        relative = abs(ref_loss - kgpt_loss) / kgpt_loss
        check(relative <= 1e-5, f"{family}: PyTorch from the export gives {ref_loss:.6f}, kgpt eval {kgpt_loss:.6f}")
        # init_from the export: the checkpoint's val loss at step 0.
        init_loss, log = step0_val_loss(os.path.join(ROOT, f"{family}_init"), COMMON + overrides +
                                        [f"model.init_from={out}"])
        check(abs(init_loss - kgpt_loss) <= 1e-4, f"{family}: init_from's step-0 val loss {init_loss} != {kgpt_loss}")
        check("init_from:" in log, f"{family}: the log does not name init_from")
        with h5py.File(os.path.join(ROOT, f"{family}_init", "history.h5"), "r") as f:
            meta = dict(f["metadata"].attrs)
            check(str(meta.get("init_from", "")).endswith("model.safetensors") and len(str(meta.get("init_from_fnv1a64", ""))) == 16,
                  f"{family}: history metadata {meta.get('init_from')} {meta.get('init_from_fnv1a64')}")
        # Resumed, the run keeps the record of the file it started from.
        resumed_dir = os.path.join(ROOT, f"{family}_init")
        r = kgpt("train", "inputs/tiny_cpu.yaml", "--run-dir", resumed_dir, "--resume",
                 *with_sets(COMMON + overrides + [f"model.init_from={out}", "train.iterations=2", "train.eval_every=1",
                                                  "run.checkpoint_every=0"]))
        check(r.returncode == 0 and "resumed_from:" in r.stdout, f"{family}: resuming the init_from run: {r.stderr[-300:]}")
        with h5py.File(os.path.join(resumed_dir, "checkpoints", "ckpt_00000002.h5"), "r") as f:
            check(dict(f["metadata"].attrs).get("init_from_fnv1a64") == meta.get("init_from_fnv1a64"),
                  f"{family}: the resumed run's checkpoint lost the init_from record")
        print(f"{family}: export exact, PyTorch {ref_loss:.6f} vs kgpt {kgpt_loss:.6f} (relative {relative:.1e}); "
              f"init_from step-0 val loss {init_loss}")
        exported[family] = (out, tensors, config, conv1d, overrides)

    # A file written here in GPT-2's own naming, with F16 and BF16 tensors and the causal-mask buffer.
    out, tensors, config, conv1d, overrides = exported["gpt2"]
    rng = np.random.default_rng(7)
    mine = {}
    for name, value in tensors.items():
        value = (value + rng.normal(0, 0.01, value.shape)).astype(np.float32)
        if name.endswith("ln_f.weight"):
            value = value.astype(np.float16).astype(np.float32)  # exact in F16
        if name.endswith("wpe.weight"):
            value = bf16_round(value)  # exact in BF16
        mine[name[len("transformer."):] if name.startswith("transformer.") else name] = value
    mine["h.0.attn.bias"] = np.tril(np.ones((SEQ, SEQ), dtype=np.float32))
    own = os.path.join(ROOT, "own.safetensors")
    write_safetensors(own, mine, {"ln_f.weight": "F16", "wpe.weight": "BF16"})
    loss, _ = step0_val_loss(os.path.join(ROOT, "own_init"), COMMON + overrides + [f"model.init_from={own}"])
    expected = reference_loss("gpt2", config, kgpt_params_from_hf("gpt2", mine, conv1d))
    check(abs(loss - expected) / expected <= 1e-5, f"own file: kgpt's step-0 val loss {loss}, PyTorch {expected:.6f}")
    print(f"own file (GPT-2 names, F16 and BF16 tensors): kgpt {loss} vs PyTorch {expected:.6f}")

    # A deck of shorter sequences than the file's positions loads the table's first rows (and says
    # so); the PyTorch model with those rows gives the same step-0 val loss at that length.
    short = SEQ // 2
    short_dir = os.path.join(ROOT, "own_init_short")
    loss, log = step0_val_loss(short_dir, COMMON + overrides + [f"model.init_from={own}", f"train.seq_len={short}"])
    cropped = kgpt_params_from_hf("gpt2", mine, conv1d)
    cropped["transformer.wpe.weight"] = cropped["transformer.wpe.weight"][:short]
    expected = reference_loss("gpt2", config, cropped, short)
    check(abs(loss - expected) / expected <= 1e-5,
          f"own file at {short} tokens: kgpt's step-0 val loss {loss}, PyTorch with the first {short} positions {expected:.6f}")
    check(f"positions_cropped:transformer.wpe.weight {SEQ}->{short}" in log,
          f"the log does not say the position table was cropped: {log[:600]}")
    print(f"own file at {short} tokens, positions cropped: kgpt {loss} vs PyTorch {expected:.6f}")
    # A deck of longer sequences than the file has positions for is refused, naming both.
    expect_refused(["check", "inputs/tiny_cpu.yaml", *with_sets(COMMON + overrides),
                    "--set", f"model.init_from={own}", "--set", f"train.seq_len={2 * SEQ}"],
                   ["wpe.weight", f"up to {SEQ} tokens", "train.seq_len", f"asks for {2 * SEQ}"],
                   "init_from with fewer positions than train.seq_len")

    # Bad files: exit 2 naming the file (and the tensor), no run directory.
    base = ["check", "inputs/tiny_cpu.yaml", *with_sets(COMMON + overrides)]
    with open(own, "rb") as f:
        good = f.read()
    cases = []
    path = os.path.join(ROOT, "truncated.safetensors")
    with open(path, "wb") as f:
        f.write(good[:len(good) // 2])
    cases.append((path, ["outside"], "truncated"))
    path = os.path.join(ROOT, "short.safetensors")
    with open(path, "wb") as f:
        f.write(b"abc")
    cases.append((path, ["fewer than the 8"], "3 bytes"))
    path = os.path.join(ROOT, "text.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", 20) + b"this is not json at all")
    cases.append((path, ["not JSON"], "not safetensors"))
    path = os.path.join(ROOT, "huge.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", 1 << 60) + b"{}")
    cases.append((path, ["header's length"], "a huge header length"))
    for label, patch, needle in [
        ("lying offsets", lambda h: h["wte.weight"].__setitem__("data_offsets", [0, 10 ** 12]), "wte.weight"),
        ("wrong size", lambda h: h["wte.weight"].__setitem__("shape", [257, 127]), "wte.weight"),
        ("unknown dtype", lambda h: h["wpe.weight"].__setitem__("dtype", "I8"), "I8"),
    ]:
        path = os.path.join(ROOT, label.replace(" ", "_") + ".safetensors")
        write_safetensors(path, mine, {"ln_f.weight": "F16", "wpe.weight": "BF16"}, patch)
        cases.append((path, [needle], label))
    missing = dict(mine)
    del missing["h.2.mlp.c_fc.weight"]
    path = os.path.join(ROOT, "missing.safetensors")
    write_safetensors(path, missing)
    cases.append((path, ["transformer.h.2.mlp.c_fc.weight", "not in the file"], "a missing tensor"))
    misshapen = dict(mine)
    misshapen["h.1.attn.c_attn.weight"] = misshapen["h.1.attn.c_attn.weight"].T.copy()
    path = os.path.join(ROOT, "misshapen.safetensors")
    write_safetensors(path, misshapen)
    cases.append((path, ["h.1.attn.c_attn.weight", "(384, 128)", "(128, 384)"], "a misshapen tensor"))
    extra = dict(mine)
    extra["h.0.attn.extra"] = np.zeros(3, dtype=np.float32)
    path = os.path.join(ROOT, "extra.safetensors")
    write_safetensors(path, extra)
    cases.append((path, ["h.0.attn.extra", "not in the deck's model"], "a tensor the model lacks"))
    for path, needles, label in cases:
        expect_refused(base + ["--set", f"model.init_from={path}"], [os.path.basename(path), "model.init_from"] + needles,
                       f"init_from {label}")
        run_dir = os.path.join(ROOT, "refused_" + os.path.basename(path))
        expect_refused(["train", "inputs/tiny_cpu.yaml", "--run-dir", run_dir, *with_sets(COMMON + overrides),
                        "--set", f"model.init_from={path}"], [os.path.basename(path)], f"train with init_from {label}",
                       leaves=run_dir)

    # Exports that cannot be: golf, a softcapped gpt2, a gpt2 that runs a block twice, an existing folder.
    golf_dir = os.path.join(ROOT, "golf")
    kgpt("train", "inputs/tiny_cpu.yaml", "--run-dir", golf_dir, *with_sets(["train.iterations=1", "run.checkpoint_every=1",
                                                                             "train.eval_every=0", "train.val_tokens=4096"]))
    golf_ckpt = os.path.join(golf_dir, "checkpoints", "ckpt_00000001.h5")
    expect_refused(["export", golf_ckpt, "--format", "hf", "--out", os.path.join(ROOT, "golf_hf")],
                   ["golf", "no Hugging Face transformers class"], "golf export", leaves=os.path.join(ROOT, "golf_hf"))
    capped_dir = os.path.join(ROOT, "capped")
    kgpt("train", "inputs/tiny_cpu.yaml", "--run-dir", capped_dir,
         *with_sets(FAMILIES["gpt2"] + ["train.iterations=1", "run.checkpoint_every=1", "train.eval_every=0",
                                        "train.val_tokens=4096", "model.logit_softcap=30"]))
    expect_refused(["export", os.path.join(capped_dir, "checkpoints", "ckpt_00000001.h5"), "--format", "hf", "--out",
                    os.path.join(ROOT, "capped_hf")], ["model.logit_softcap"], "softcapped export",
                   leaves=os.path.join(ROOT, "capped_hf"))
    recurrent_dir = os.path.join(ROOT, "recurrent")
    kgpt("train", "inputs/tiny_cpu.yaml", "--run-dir", recurrent_dir,
         *with_sets(FAMILIES["gpt2"] + ["train.iterations=1", "run.checkpoint_every=1", "train.eval_every=0",
                                        "train.val_tokens=4096", "model.logit_softcap=0", "model.recur_start=0",
                                        "model.recur_count=1"]))
    expect_refused(["export", os.path.join(recurrent_dir, "checkpoints", "ckpt_00000001.h5"), "--format", "hf", "--out",
                    os.path.join(ROOT, "recurrent_hf")], ["model.recur_start", "GPT2LMHeadModel", "twice"],
                   "export of a repeated block", leaves=os.path.join(ROOT, "recurrent_hf"))
    before = os.path.getmtime(os.path.join(out, "model.safetensors"))
    expect_refused(["export", os.path.join(ROOT, "gpt2", "checkpoints", "ckpt_00000006.h5"), "--format", "hf", "--out",
                    out], [out, "exists"], "export onto an existing folder")
    check(os.path.getmtime(os.path.join(out, "model.safetensors")) == before, "an existing export was touched")
    check(not [p for p in os.listdir(ROOT) if ".partial-" in p], "a temporary export folder was left behind")

    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("hf interop: all checks passed")


main()
