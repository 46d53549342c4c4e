"""History, checkpoints, resume and preemption of `kgpt train`, run for real under mpiexec and read
back with h5py.

usage: test_checkpoints.py KGPT MPIEXEC DECK WORKDIR

- history.h5 is readable (SWMR) while a run goes on, and survives kill -9 of the job;
- SIGUSR2 mid-run: a checkpoint, and the run goes on; then SIGUSR1 to mpiexec (which forwards it):
  a checkpoint, exit code 3; --resume finishes the run with train losses equal
  bit for bit to an uninterrupted run at the same world size, and no step twice in the history;
- resuming that checkpoint at another world size gives losses within 1e-5 relative; with late QAT
  within 1e-5 until QAT starts and 5e-4 after, as far as an uninterrupted run at another world size;
- a truncated and a corrupted newest checkpoint are skipped with a message naming the file, and a
  leftover temporary file (a write killed midway) is ignored: the previous checkpoint is used;
- a checkpoint of another architecture is refused with a message naming the key and both values;
- a NaN loss stops the run with a message and leaves the last good checkpoint as it was;
- kill -9 in the middle of a checkpoint write leaves the previous checkpoints loadable.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "parallel"))
from mpi_jobs import ENV, start_train  # noqa: E402

KGPT, MPIEXEC, DECK, WORKDIR = sys.argv[1:5]
ROOT = os.path.join(WORKDIR, "checkpoint_runs")
COMMON = ["--set", "train.iterations=30", "--set", "run.checkpoint_every=5", "--set", "train.eval_every=10"]
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def command(ranks, run_dir, *extra):
    return [MPIEXEC, "--oversubscribe", "-n", str(ranks), KGPT, "train", DECK, "--run-dir", run_dir, *COMMON, *extra]


def run(ranks, run_dir, *extra):
    return subprocess.run(command(ranks, run_dir, *extra), cwd=WORKDIR, env=ENV, capture_output=True, text=True,
                          timeout=300)


def history(run_dir):
    with h5py.File(os.path.join(run_dir, "history.h5"), "r", swmr=True) as f:
        return {group: {name: f[group][name][()] for name in f[group]} for group in ("train", "val")}


def start_and_wait_for(ranks, run_dir, marker, *extra):
    return start_train(MPIEXEC, KGPT, ranks, DECK, WORKDIR, ["--run-dir", run_dir, *COMMON, *extra], marker)


shutil.rmtree(ROOT, ignore_errors=True)
os.makedirs(ROOT)

# The reference: 30 steps without interruption on 2 ranks.
reference_dir = os.path.join(ROOT, "reference")
result = run(2, reference_dir)
check(result.returncode == 0, f"reference run failed:\n{result.stderr[-2000:]}")
reference = history(reference_dir)
check(list(reference["train"]["step"]) == list(range(1, 31)), "reference history steps")
check(list(reference["val"]["step"]) == [0, 10, 20, 30], f"reference val steps {reference['val']['step']}")
with h5py.File(os.path.join(reference_dir, "history.h5"), "r") as f:
    check("description" in f["train/loss"].attrs and f["train/loss"].attrs["units"] == "nats/token",
          "history columns carry units and descriptions")
    check(int(f["metadata"].attrs["world_size"]) == 2, "history metadata world size")
    deck_text = f["metadata/deck"][()]
    deck_text = deck_text.decode() if isinstance(deck_text, bytes) else deck_text
    check("checkpoint_every: 5" in deck_text, "history holds the resolved deck text")
    check(f["train/tokens"][-1] == 30 * 1024, "tokens column")
checkpoints = sorted(os.listdir(os.path.join(reference_dir, "checkpoints")))
check(checkpoints == ["ckpt_00000020.h5", "ckpt_00000025.h5", "ckpt_00000030.h5"],
      f"the newest 3 checkpoints are kept: {checkpoints}")

# SIGUSR1 to every rank mid-run: checkpoint, exit code 3, then --resume to the end.
preempted_dir = os.path.join(ROOT, "preempted")
job, lines = start_and_wait_for(2, preempted_dir, "step:12/", "--set", "train.log_every=1")
live = history(preempted_dir)  # read while the job runs
check(len(live["train"]["step"]) >= 12, f"history read during the run has {len(live['train']['step'])} rows")
os.kill(job.pid, signal.SIGUSR2)  # a checkpoint on request; the run goes on
for line in job.stdout:
    lines.append(line)
    if line.startswith("checkpoint:") and int(line.rsplit("step:", 1)[1]) % 5 != 0:
        break
os.kill(job.pid, signal.SIGUSR1)  # mpiexec forwards it to every rank
rest, _ = job.communicate(timeout=120)
output = "".join(lines) + rest
print("preempted:", [line for line in output.splitlines() if line.startswith(("preempted", "checkpoint"))])
requested = [line for line in output.splitlines() if line.startswith("checkpoint:")]
check(any(int(line.rsplit("step:", 1)[1]) % 5 != 0 for line in requested),
      f"SIGUSR2 wrote no checkpoint between the scheduled ones: {requested}")
check(job.returncode == 3, f"preempted job exit code {job.returncode}, want 3\n{output[-2000:]}")
saved = sorted(os.listdir(os.path.join(preempted_dir, "checkpoints")))
check(len(saved) > 0, "no checkpoint after SIGUSR1")
preempt_checkpoint = saved[-1]
shutil.copy(os.path.join(preempted_dir, "checkpoints", preempt_checkpoint), os.path.join(ROOT, preempt_checkpoint))
result = run(2, preempted_dir, "--resume")
check(result.returncode == 0, f"resume failed:\n{result.stderr[-2000:]}")
resumed = history(preempted_dir)
check(list(resumed["train"]["step"]) == list(range(1, 31)), f"resumed history steps {resumed['train']['step']}")
check(list(resumed["val"]["step"]) == [0, 10, 20, 30], f"resumed val steps {resumed['val']['step']}")
check(np.array_equal(resumed["train"]["loss"], reference["train"]["loss"]),
      "resumed losses are not bit-identical to the uninterrupted run: max difference "
      f"{np.max(np.abs(resumed['train']['loss'] - reference['train']['loss']))}")
check(np.array_equal(resumed["val"]["loss"], reference["val"]["loss"]), "resumed val losses differ")

# The same checkpoint resumed at world sizes 1 and 4.
preempt_step = int(preempt_checkpoint[5:13])
for ranks in (1, 4):
    other = os.path.join(ROOT, f"resumed_on_{ranks}")
    shutil.copytree(preempted_dir, other)
    shutil.rmtree(os.path.join(other, "checkpoints"))
    os.makedirs(os.path.join(other, "checkpoints"))
    shutil.copy(os.path.join(ROOT, preempt_checkpoint), os.path.join(other, "checkpoints", preempt_checkpoint))
    result = run(ranks, other, "--resume")
    check(result.returncode == 0, f"resume on {ranks} rank(s) failed:\n{result.stderr[-2000:]}")
    losses = history(other)["train"]["loss"]
    with h5py.File(os.path.join(other, "history.h5"), "r") as f:
        check(int(f["metadata"].attrs["world_size"]) == ranks, f"resumed on {ranks} rank(s): metadata world size")
    error = np.max(np.abs(losses - reference["train"]["loss"]) / reference["train"]["loss"])
    print(f"resumed step {preempt_step} on {ranks} rank(s): max relative loss difference {error:.2e}")
    check(error <= 1e-5, f"resume on {ranks} rank(s): losses differ by {error:.2e} relative")

# Late QAT resumed at other world sizes. Until QAT starts the plain bound holds; from then on the
# weights' one-ulp differences flip a code of the quantization grid now and then, and each flip
# moves the loss by a step of that grid, so the runs drift apart further (README, "Resuming").
# An uninterrupted run at another world size drifts as far: it is the world size, not the resume.
QAT = ["--set", "train.qat_start_lr=0.9", "--set", "train.warmdown_iters=20", "--set", "run.checkpoint_keep_every=10"]
QAT_BOUND = 5e-4
qat_dir = os.path.join(ROOT, "qat_reference")
result = run(2, qat_dir, *QAT)
check(result.returncode == 0, f"the QAT reference run failed:\n{result.stderr[-2000:]}")
started = [int(line.split("step:")[1].split()[0]) for line in result.stdout.splitlines() if line.startswith("late_qat:")]
check(started == [14], f"late QAT starts at step {started}, the schedule says 14")
qat_reference = history(qat_dir)["train"]["loss"]
for ranks in (1, 4):
    other = os.path.join(ROOT, f"qat_resumed_on_{ranks}")
    shutil.copytree(qat_dir, other)
    for name in os.listdir(os.path.join(other, "checkpoints")):
        if int(name[5:13]) > 10:
            os.remove(os.path.join(other, "checkpoints", name))
    result = run(ranks, other, "--resume", *QAT)
    check(result.returncode == 0, f"QAT resumed on {ranks} rank(s) failed:\n{result.stderr[-2000:]}")
    error = np.abs(history(other)["train"]["loss"] - qat_reference) / qat_reference
    before, after = error[:13].max(), error[13:].max()
    print(f"late QAT resumed at step 10 on {ranks} rank(s): max relative loss difference {before:.2e} before QAT "
          f"(steps 11-13), {after:.2e} with it (steps 14-30)")
    check(before <= 1e-5, f"QAT resumed on {ranks} rank(s): before QAT the losses differ by {before:.2e} relative")
    check(after <= QAT_BOUND, f"QAT resumed on {ranks} rank(s): the losses differ by {after:.2e} relative")
uninterrupted = os.path.join(ROOT, "qat_on_4")
result = run(4, uninterrupted, *QAT)
check(result.returncode == 0, f"the QAT run on 4 ranks failed:\n{result.stderr[-2000:]}")
drift = (np.abs(history(uninterrupted)["train"]["loss"] - qat_reference) / qat_reference).max()
print(f"late QAT uninterrupted on 4 ranks: max relative loss difference {drift:.2e}")
check(drift <= QAT_BOUND, f"late QAT on 4 ranks differs from 2 ranks by {drift:.2e} relative")

# Broken newest checkpoints are skipped; a leftover temporary file is ignored.
broken_dir = os.path.join(ROOT, "broken")
shutil.copytree(reference_dir, broken_dir)
folder = os.path.join(broken_dir, "checkpoints")
with open(os.path.join(folder, "ckpt_00000030.h5"), "r+b") as f:
    f.truncate(os.path.getsize(f.name) // 2)
with h5py.File(os.path.join(folder, "ckpt_00000025.h5"), "r+") as f:
    name = next(iter(f["params"]))
    f["params"][name][(0,) * f["params"][name].ndim] += 1.0
with open(os.path.join(folder, "ckpt_00000035.h5.tmp"), "wb") as f:
    f.write(b"\x89HDF\r\n\x1a\n a write that was killed")
result = run(2, broken_dir, "--resume", "--set", "train.iterations=31")
skipped = [line for line in result.stdout.splitlines() if line.startswith("skipping_checkpoint")]
print("skipped:", skipped)
check(result.returncode == 0, f"resume past broken checkpoints failed:\n{result.stderr[-2000:]}")
check(any("ckpt_00000030.h5" in line for line in skipped), "the truncated checkpoint is not named")
check(any("ckpt_00000025.h5" in line and "checksum" in line for line in skipped), "the corrupted one is not named")
check("resumed_from:" + os.path.join(folder, "ckpt_00000020.h5") in result.stdout, "did not resume from step 20")

# Another architecture is refused, naming the key, both values and the checkpoint.
result = run(2, reference_dir, "--resume", "--set", "model.d_model=64")
print("other architecture:", result.stderr.strip().splitlines()[:1])
check(result.returncode == 2, f"another architecture: exit {result.returncode}, want 2")
check(os.path.join(reference_dir, "checkpoints", "ckpt_00000030.h5") in result.stderr
      and "model.d_model is 32 there and 64 here (--set model.d_model=64)" in result.stderr,
      "another architecture: the message does not name the key, its values and the checkpoint")

# A NaN loss stops the run; the last good checkpoint stays as it was.
nan_dir = os.path.join(ROOT, "nan")
result = run(2, nan_dir, "--set", "optim.embed_lr=1e30", "--set", "optim.scalar_lr=1e30",
             "--set", "train.warmup_steps=0", "--set", "run.checkpoint_every=1")
print("nan:", result.stderr.strip().splitlines()[:1])
check(result.returncode == 1 and ("the train loss is" in result.stderr or "non-finite" in result.stderr),
      f"NaN guard: exit {result.returncode}")
check(len(os.listdir(os.path.join(nan_dir, "checkpoints"))) > 0, "NaN guard: no good checkpoint before the NaN")
for name in os.listdir(os.path.join(nan_dir, "checkpoints")) if os.path.isdir(os.path.join(nan_dir, "checkpoints")) else []:
    with h5py.File(os.path.join(nan_dir, "checkpoints", name), "r") as f:
        check(all(np.isfinite(f["params"][t][()]).all() for t in f["params"]), f"{name} holds non-finite values")

# kill -9 of the whole job mid-run: the history written so far reads back.
killed_dir = os.path.join(ROOT, "killed")
job, lines = start_and_wait_for(2, killed_dir, "step:8/", "--set", "train.log_every=1",
                                "--set", "train.iterations=100000")
for pid in subprocess.run(["pgrep", "-f", killed_dir], capture_output=True, text=True).stdout.split():
    os.kill(int(pid), signal.SIGKILL)
job.wait(timeout=60)
time.sleep(0.5)
rows = history(killed_dir)["train"]["step"]
print(f"killed: history holds {len(rows)} rows")
check(len(rows) >= 8 and list(rows) == list(range(1, len(rows) + 1)), f"history after kill -9: {rows}")

# kill -9 of the whole job while it writes a checkpoint: the job writes one every step, and is
# killed as soon as a temporary checkpoint file appears, until a kill leaves one behind; --resume
# then starts from the newest complete checkpoint without skipping any.
caught_mid_write = False
for trial in range(12):
    trial_dir = os.path.join(ROOT, f"killed_writing_{trial}")
    job, lines = start_and_wait_for(2, trial_dir, "checkpoint:", "--set", "train.iterations=100000",
                                    "--set", "run.checkpoint_every=1", "--set", "train.eval_every=0")
    folder_of_trial = os.path.join(trial_dir, "checkpoints")
    pids = [int(pid) for pid in subprocess.run(["pgrep", "-f", trial_dir], capture_output=True, text=True).stdout.split()]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(n.endswith(".tmp") for n in os.listdir(folder_of_trial)):
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    job.wait(timeout=60)
    time.sleep(0.2)
    names = sorted(os.listdir(os.path.join(trial_dir, "checkpoints")))
    complete = [n for n in names if n.endswith(".h5")]
    partial = [n for n in names if n.endswith(".tmp")]
    newest = int(complete[-1][5:13])
    result = run(2, trial_dir, "--resume", "--set", f"train.iterations={newest + 1}", "--set", "train.eval_every=0")
    check(result.returncode == 0 and f"resumed_from:{os.path.join(trial_dir, 'checkpoints', complete[-1])}"
          in result.stdout and "skipping_checkpoint" not in result.stdout,
          f"kill -9 while writing (trial {trial}, left {names}): resume failed\n{result.stdout[-1500:]}"
          f"{result.stderr[-1500:]}")
    if partial:
        print(f"kill -9 while writing: trial {trial} left {partial} beside {complete}; resumed from step {newest}")
        caught_mid_write = True
        break
check(caught_mid_write, "no kill in 12 trials landed in the middle of a checkpoint write")
stray = subprocess.run(["pgrep", "-f", os.path.join(ROOT, "killed_writing_")], capture_output=True, text=True)
check(not stray.stdout.split(), f"ranks left running after kill -9: {stray.stdout.split()}")

# kgpt inspect, eval and sample on the reference's last checkpoint.
last = os.path.join(reference_dir, "checkpoints", "ckpt_00000030.h5")
inspected = subprocess.run([KGPT, "inspect", last], capture_output=True, text=True, env=ENV)
with h5py.File(last, "r") as f:
    count = sum(f["params"][name].size for name in f["params"])
check(inspected.returncode == 0 and f"parameters: {count}" in inspected.stdout and "step: 30" in inspected.stdout,
      f"kgpt inspect on a checkpoint:\n{inspected.stdout}{inspected.stderr}")
inspected = subprocess.run([KGPT, "inspect", os.path.join(reference_dir, "history.h5")], capture_output=True,
                           text=True, env=ENV)
check(inspected.returncode == 0 and "train rows: 30" in inspected.stdout, f"kgpt inspect on a history:\n{inspected}")
for ranks in (1, 3):
    evaluated = subprocess.run([MPIEXEC, "--oversubscribe", "-n", str(ranks), KGPT, "eval", last], cwd=WORKDIR,
                               env=ENV, capture_output=True, text=True, timeout=120)
    found = [float(word.split(":")[1]) for word in evaluated.stdout.split() if word.startswith("val_loss:")]
    print(f"eval on {ranks} rank(s): {evaluated.stdout.strip()}")
    check(evaluated.returncode == 0 and len(found) == 1 and abs(found[0] - reference["val"]["loss"][-1]) < 1e-5,
          f"kgpt eval on {ranks} rank(s) gives {found}, history says {reference['val']['loss'][-1]}\n{evaluated.stderr}")
samples = [subprocess.run([KGPT, "sample", last, "--prompt", "The licence", "--max-new-tokens", "40", *extra],
                          capture_output=True, text=True, env=ENV, timeout=120)
           for extra in (["--seed", "5"], ["--seed", "5"], ["--seed", "6"], ["--temperature", "0"])]
print("samples:", [s.stdout.strip() for s in samples])
check(all(s.returncode == 0 and s.stdout.startswith("The licence") for s in samples), "kgpt sample failed")
check(samples[0].stdout == samples[1].stdout, "the same seed gave different text")
check(samples[0].stdout != samples[2].stdout, "different seeds gave the same text")
truncated = os.path.join(ROOT, "truncated.h5")
shutil.copy(last, truncated)
with open(truncated, "r+b") as f:
    f.truncate(os.path.getsize(truncated) - 4096)
broken = subprocess.run([KGPT, "eval", truncated], cwd=WORKDIR, env=ENV, capture_output=True, text=True)
print("eval of a truncated checkpoint:", broken.stderr.strip())
check(broken.returncode == 2 and "truncated.h5" in broken.stderr, f"eval of a truncated file: {broken.stderr}")

sys.exit(1 if failures else 0)
