#!/usr/bin/python3
"""Inputs and sequences outside the common path, with the real kgpt on a small golf model: each must
end with a message naming the thing and exit code 2, harming no earlier output, or do what the
documentation says.

usage: test_odd_inputs.py KGPT WORKDIR

- kgpt export --out onto the checkpoint it exports (by its own path, through "..", an absolute
  path, a link to it and a linked folder; also a checkpoint outside any run), onto the run's
  history.h5, log.txt or deck.yaml, or into its checkpoints folder: exit 2 naming --out and the
  checkpoint, every file unchanged; an artifact beside the run's files is written;
- run.name '../../escape' in a deck (named with its line:column), --set run.name=.., '.' or 'a/b',
  --run-suffix with a '/', and a deck file whose name stands for no folder ('..yaml'): exit 2 and
  nothing written outside run.out_dir;
- --weights swa of a checkpoint taken before the SWA's first snapshot: eval, sample and export exit
  2 naming the snapshot count; a checkpoint after it evaluates;
- train.val_tokens below train.seq_len: kgpt check --no-data names train.val_tokens and its line;
- --resume with a model key changed that keeps every shape (model.recur_start, model.logit_softcap):
  exit 2 naming each key, both values and the checkpoint, the run's files unchanged; keys that only
  choose how the model is computed (model.attention, train.recompute) resume;
- the wall-clock budget across a resume: a cap below the training time the checkpoint already holds
  stops the resumed run after one step, and the wall-clock warmdown continues from that time (the
  first resumed step's learning rate is half the base where the schedule says so);
- the byte tokenizer's vocabulary at its boundary: model.vocab_size 256 (no id for the document
  boundary) is refused by kgpt check --no-data as by the data, 257 passes both and trains;
- a run whose output reader goes away after the first line (`| head -1`) trains to its end.
"""

import glob
import hashlib
import os
import shutil
import subprocess
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from golf_runs import SMALL_GOLF_SECTIONS, check, failures, text_tokens  # noqa: E402
from shards import write_shard  # noqa: E402

KGPT, WORKDIR = sys.argv[1:3]
ROOT = os.path.join(WORKDIR, "odd_inputs")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")
BOUNDARY = 256  # the byte tokenizer's document boundary

DECK = """\
run:
  out_dir: runs
  checkpoint_every: 4
""" + SMALL_GOLF_SECTIONS + """\
train:
  seq_len: 16
  global_batch_tokens: 256
  accum_total: 1
  iterations: 12
  warmdown_iters: 0
  eval_every: 0
  val_tokens: 320
  log_every: 1
"""


def kgpt(*args):
    return subprocess.run([KGPT, *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)


def must_run(*args):
    r = kgpt(*args)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(f"kgpt {' '.join(args[:3])}: exit code {r.returncode}")
    return r


def refused(label, result, *needles):
    """Exit code 2 and every needle in the message."""
    message = result.stderr
    check(result.returncode == 2, f"{label}: exit code {result.returncode}, want 2\n{result.stdout}{message}")
    for needle in needles:
        check(needle in message, f"{label}: the message does not name {needle!r}:\n{message}")


def write(name, text):
    path = os.path.join(ROOT, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def fingerprint(folder):
    """Every file below `folder` with its SHA-256."""
    found = {}
    for path in sorted(glob.glob(os.path.join(folder, "**"), recursive=True)):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return found


def history(run_dir):
    with h5py.File(os.path.join(run_dir, "history.h5"), "r") as f:
        return {name: f["train"][name][()] for name in f["train"]}


def with_boundaries(tokens, every):
    out = []
    for i in range(0, len(tokens), every):
        out += [BOUNDARY] + tokens[i:i + every]
    return out


def export_onto_run_files():
    run_dir = os.path.join(ROOT, "runs", "base")
    checkpoint = os.path.join(run_dir, "checkpoints", "ckpt_00000012.h5")
    before = fingerprint(run_dir)
    os.symlink(checkpoint, os.path.join(ROOT, "link_to_checkpoint.h5"))
    os.symlink(run_dir, os.path.join(ROOT, "linked_run"))
    for out in ["runs/base/checkpoints/ckpt_00000012.h5", "runs/base/checkpoints/../checkpoints/ckpt_00000012.h5",
                checkpoint, "link_to_checkpoint.h5", "linked_run/checkpoints/ckpt_00000012.h5",
                "runs/base/checkpoints/ckpt_00000008.h5", "runs/base/checkpoints/ckpt_00000099.h5",
                "runs/base/history.h5", "linked_run/log.txt", "runs/base/deck.yaml"]:
        result = kgpt("export", "runs/base/checkpoints/ckpt_00000012.h5", "--out", out)
        refused(f"export --out {out}", result, f"--out {out} ", "runs/base/checkpoints/ckpt_00000012.h5")
    check(fingerprint(run_dir) == before, "a refused export changed the run's files")
    # A checkpoint outside any run directory is protected as itself.
    shutil.copy(checkpoint, os.path.join(ROOT, "loose.h5"))
    loose = fingerprint(ROOT)["loose.h5"]
    for out in ("loose.h5", "./loose.h5", os.path.join(ROOT, "loose.h5")):
        refused(f"export loose.h5 --out {out}", kgpt("export", "loose.h5", "--out", out), f"--out {out} ", "itself")
    check(fingerprint(ROOT)["loose.h5"] == loose, "a refused export changed the checkpoint it exports")
    must_run("export", "runs/base/checkpoints/ckpt_00000012.h5", "--out", "runs/base/model.int8.ptz")
    after = fingerprint(run_dir)
    check({k: v for k, v in after.items() if k not in ("model.int8.ptz", "artifact.yaml")} == before,
          "an export beside the run's files changed them")


def run_names():
    escaped = os.path.join(ROOT, "..", "escape")
    deck = write("escape.yaml", DECK.replace("  out_dir: runs\n", "  out_dir: runs\n  name: ../../escape\n"))
    for command in (["check", deck, "--no-data"], ["train", deck]):
        refused(f"run.name ../../escape ({command[0]})", kgpt(*command), "escape.yaml:3:9", "run.name", "'/'")
    base = write("names.yaml", DECK)
    for name in ("..", ".", "a/b"):
        refused(f"--set run.name={name}", kgpt("train", base, "--set", f"run.name={name}"),
                f"--set run.name={name}", "run.name")
    refused("--run-suffix /../x", kgpt("train", base, "--run-suffix", "/../x"), "--run-suffix", "'/'")
    dots = write("..yaml", DECK)
    refused("a deck named ..yaml", kgpt("train", dots), "..yaml", "set run.name")
    check(not os.path.exists(escaped), f"a run was written outside run.out_dir: {escaped}")
    check(sorted(os.listdir(os.path.join(ROOT, "runs"))) == ["base", "clock", "swa"],
          f"a refused run name left a folder in runs/: {sorted(os.listdir(os.path.join(ROOT, 'runs')))}")


def swa_before_its_first_snapshot():
    # The warmdown's multiplier (12 - s) / 8 is below 0.5 from step 10 on: the only multiple of 4
    # there is 12, so checkpoints 4 and 8 hold no snapshot.
    early, late = "runs/swa/checkpoints/ckpt_00000008.h5", "runs/swa/checkpoints/ckpt_00000012.h5"
    with h5py.File(os.path.join(ROOT, early), "r") as a, h5py.File(os.path.join(ROOT, late), "r") as b:
        counts = int(a["state/swa_count"][()]), int(b["state/swa_count"][()])
    check(counts == (0, 1), f"SWA snapshots at steps 8 and 12: {counts}, want (0, 1)")
    for command in (["eval", early], ["sample", early, "--max-new-tokens", "4"],
                    ["export", early, "--out", "swa_early.ptz"]):
        refused(f"{command[0]} --weights swa before the first snapshot", kgpt(*command, "--weights", "swa"),
                early, "swa_count 0", "train.swa_every = 4")
    check(not os.path.exists(os.path.join(ROOT, "swa_early.ptz")), "a refused export wrote its artifact")
    scored = must_run("eval", late, "--weights", "swa").stdout
    check("weights:swa" in scored, f"eval --weights swa after the first snapshot: {scored}")


def val_tokens_below_a_window():
    deck = write("short_val.yaml", DECK.replace("val_tokens: 320", "val_tokens: 10"))
    line = DECK.splitlines().index("  val_tokens: 320") + 1
    for command in (["check", deck, "--no-data"], ["train", deck, "--run-dir", "runs/short_val"]):
        refused(f"val_tokens 10 ({command[0]})", kgpt(*command), f"short_val.yaml:{line}:15", "train.val_tokens",
                "train.seq_len = 16")
    check(not os.path.exists(os.path.join(ROOT, "runs", "short_val")), "a refused deck made its run directory")


def resume_with_model_changes():
    run_dir = os.path.join(ROOT, "runs", "base")
    before = fingerprint(run_dir)
    checkpoint = os.path.join("runs", "base", "checkpoints", "ckpt_00000012.h5")
    result = kgpt("train", "base.yaml", "--run-dir", "runs/base", "--resume", "--set", "train.iterations=16",
                  "--set", "model.recur_start=0", "--set", "model.logit_softcap=20")
    refused("--resume with model keys changed", result, checkpoint,
            "model.logit_softcap is 30.0 there and 20.0 here (--set model.logit_softcap=20)",
            "model.recur_start is -1 there and 0 here (--set model.recur_start=0)")
    check("no checkpoint to resume from" not in result.stderr, f"the message blames the checkpoints:\n{result.stderr}")
    after = fingerprint(run_dir)
    check({k: v for k, v in after.items() if k != "log.txt"} == {k: v for k, v in before.items() if k != "log.txt"},
          "a refused resume changed the run's files")
    # How the model is computed may change: the same function.
    shutil.copytree(run_dir, os.path.join(ROOT, "runs_resumed", "base"))
    result = kgpt("train", "base.yaml", "--run-dir", "runs_resumed/base", "--resume", "--set", "train.iterations=16",
                  "--set", "model.attention=gemm", "--set", "train.recompute=block")
    check(result.returncode == 0 and "resumed_from:" in result.stdout,
          f"--resume with model.attention and train.recompute changed: exit {result.returncode}\n{result.stderr}")


def wall_clock_across_a_resume():
    """The checkpoint of step 6 holds the training time of 6 steps; a resumed run counts on from it."""
    source = os.path.join(ROOT, "runs", "clock")
    with h5py.File(os.path.join(source, "checkpoints", "ckpt_00000006.h5"), "r") as f:
        spent = float(f["state/training_seconds"][()])
    check(spent > 0, f"the checkpoint of step 6 holds {spent} s of training")

    def resumed(name, *settings):
        run_dir = os.path.join(ROOT, "runs_resumed", name)
        shutil.copytree(source, run_dir)
        os.remove(os.path.join(run_dir, "checkpoints", "ckpt_00000012.h5"))
        args = ["train", "clock.yaml", "--run-dir", run_dir, "--resume"]
        for s in settings:
            args += ["--set", s]
        return must_run(*args).stdout, history(run_dir)

    # A cap below the time already spent: one step, then the cap.
    log, rows = resumed("capped", f"train.max_wallclock_seconds={spent / 2!r}")
    check("stopping_early: wallclock_cap" in log and list(rows["step"]) == list(range(1, 8)),
          f"resumed under a cap of half the time spent, the run went on to step {rows['step'][-1]}:\n{log}")
    # The warmdown over the last 4 steps' worth of time, with the cap placed so that the first
    # resumed step has half of that time left: its multiplier is 0.5.
    warmdown, steps_done = 4, 6
    cap = spent * (1 + warmdown / (2 * steps_done))
    log, rows = resumed("warmdown", f"train.max_wallclock_seconds={cap!r}", f"train.warmdown_iters={warmdown}")
    ratio = rows["lr_matrix"][6] / rows["lr_matrix"][0]
    check(abs(ratio - 0.5) < 1e-6, f"the first resumed step's learning rate is {ratio:.6f} of the base, want 0.5")


def output_reader_gone():
    """`kgpt train ... | head -1`: the reader of the log lines goes away after the first; the run goes
    on to its end (log.txt has every line) instead of dying of SIGPIPE at its next line."""
    job = subprocess.Popen([KGPT, "train", "base.yaml", "--run-dir", "runs_piped"], cwd=ROOT, env=ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    job.stdout.readline()
    job.stdout.close()
    code = job.wait(timeout=300)
    log = open(os.path.join(ROOT, "runs_piped", "log.txt")).read()
    check(code == 0 and "done steps:12" in log, f"a run whose output reader went away: exit {code}\n{log[-500:]}")


def byte_vocabulary_boundary():
    base = os.path.join(ROOT, "base.yaml")
    short = kgpt("check", base, "--no-data", "--set", "model.vocab_size=256")
    refused("vocab_size 256 with the byte tokenizer (--no-data)", short, "--set model.vocab_size=256",
            "model.vocab_size", "257")
    refused("vocab_size 256 with the byte tokenizer (the data)", kgpt("check", base, "--set", "model.vocab_size=256"),
            "model.vocab_size")
    check(kgpt("check", base, "--no-data").returncode == 0, "vocab_size 257 is refused by kgpt check --no-data")
    check(kgpt("check", base).returncode == 0, "vocab_size 257 is refused with the data")


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    # Documents of 40 bytes, each after the boundary token: a byte model needs 257 ids.
    write_shard(os.path.join(ROOT, "train_000000.bin"), with_boundaries(text_tokens(1, 20000), 40))
    write_shard(os.path.join(ROOT, "val_000000.bin"), with_boundaries(text_tokens(2, 600), 40))
    write("base.yaml", DECK)
    write("clock.yaml", DECK.replace("checkpoint_every: 4", "checkpoint_every: 6"))
    must_run("train", "base.yaml", "--run-dir", "runs/base")
    must_run("train", "clock.yaml", "--run-dir", "runs/clock")
    must_run("train", "base.yaml", "--run-dir", "runs/swa", "--set", "train.swa_every=4",
             "--set", "train.warmdown_iters=8", "--set", "train.swa_start_lr=0.5")
    export_onto_run_files()
    run_names()
    swa_before_its_first_snapshot()
    val_tokens_below_a_window()
    resume_with_model_changes()
    wall_clock_across_a_resume()
    byte_vocabulary_boundary()
    output_reader_gone()
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("odd inputs: all checks passed")


main()
