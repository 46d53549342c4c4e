"""Failure behaviour of `kgpt train` on several MPI ranks (docs/design.md, section 9): bad input
gives one message and exit code 2 from every rank; a failure on one rank ends every rank within
seconds with the failing rank named; nothing hangs. Also the wall-clock cap, a stop decision all
ranks must take at the same step.

usage: test_failures.py KGPT MPIEXEC DECK WORKDIR
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

from mpi_jobs import ENV, rank_pids, ranks_left, start_train

KGPT, MPIEXEC, DECK, WORKDIR = sys.argv[1:5]
failures = []


def mpirun(ranks, *args, env=None, timeout=120):
    command = [MPIEXEC, "--oversubscribe", "-n", str(ranks), KGPT, "train", DECK, *args]
    start = time.monotonic()
    result = subprocess.run(command, cwd=WORKDIR, env=env or ENV, capture_output=True, text=True, timeout=timeout)
    return result, time.monotonic() - start


def expect_one_message(name, ranks, args, code, text, env=None):
    result, seconds = mpirun(ranks, *args, env=env)
    errors = [line for line in result.stderr.splitlines() if line.startswith("kgpt train: ")]
    print(f"{name}: exit {result.returncode} after {seconds:.1f} s; messages: {errors}")
    if result.returncode != code:
        failures.append(f"{name}: exit code {result.returncode}, want {code}\n{result.stderr}")
    if len(errors) != 1 or text not in errors[0]:
        failures.append(f"{name}: want exactly one message containing {text!r}, got {errors}")


def start_long_run(run_dir, marker, *extra):
    """Starts a practically endless 2-rank run; returns the job and its output up to the line that
    starts with `marker`."""
    return start_train(MPIEXEC, KGPT, 2, DECK, WORKDIR, ["--run-dir", run_dir, "--set", "train.iterations=1000000",
                                                         "--set", "train.eval_every=0", *extra], marker)


def kill_one_rank_mid_run():
    run_dir = os.path.join(WORKDIR, "failure_runs", "killed")
    job, output = start_long_run(run_dir, "step:3/")
    ranks = rank_pids(run_dir)
    if 1 not in ranks:
        job.kill()
        failures.append(f"kill: could not find rank 1 among {ranks}")
        return
    killed_at = time.monotonic()
    os.kill(ranks[1], signal.SIGKILL)
    try:
        rest, _ = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        failures.append("kill: the job still ran 60 s after rank 1 was killed")
        return
    seconds = time.monotonic() - killed_at
    output.append(rest)
    text = "".join(output)
    named = re.search(r"rank 1 .*(signal 9|Killed)", text) is not None
    print(f"kill rank 1: job ended {seconds:.1f} s later with exit {job.returncode}; rank named: {named}")
    if job.returncode == 0:
        failures.append("kill: the job exited 0")
    if seconds > 30:
        failures.append(f"kill: the other rank took {seconds:.1f} s to end")
    if not named:
        failures.append("kill: the output does not name rank 1:\n" + text[-2000:])
    left = ranks_left(ranks)
    if left:
        failures.append(f"kill: ranks {left} were still running 5 s after the job ended")


shutil.rmtree(os.path.join(WORKDIR, "failure_runs"), ignore_errors=True)
os.makedirs(os.path.join(WORKDIR, "failure_runs"))
expect_one_message("accum_total not divisible by the world size", 3,
                   ["--run-dir", os.path.join(WORKDIR, "failure_runs", "indivisible")], 2,
                   "train.accum_total = 8 is not divisible by the world size 3")
expect_one_message("missing train shards", 2,
                   ["--run-dir", os.path.join(WORKDIR, "failure_runs", "missing"),
                    "--set", "data.train_files=nowhere/x_*.bin"], 2, "no file matches 'nowhere/x_*.bin'")
expect_one_message("unknown deck key", 2,
                   ["--run-dir", os.path.join(WORKDIR, "failure_runs", "unknown"),
                    "--set", "parallel.bucket_size=4"], 2, "parallel.bucket_size")
# Only rank 0 makes the run directory: its failure must still end every rank, with one message.
occupied = os.path.join(WORKDIR, "failure_runs", "occupied")
os.makedirs(occupied, exist_ok=True)
for name in ("deck.yaml", "log.txt"):
    with open(os.path.join(occupied, name), "w") as f:
        f.write("an earlier run\n")
expect_one_message("existing run directory (fails on rank 0 only)", 2, ["--run-dir", occupied], 2, occupied)
for name in ("deck.yaml", "log.txt"):
    with open(os.path.join(occupied, name)) as f:
        if f.read() != "an earlier run\n":
            failures.append(f"existing run directory: the earlier {name} was changed")
expect_one_message("world size differs from SLURM_NTASKS", 2,
                   ["--run-dir", os.path.join(WORKDIR, "failure_runs", "slurm")], 1,
                   "MPI world size is 2 but SLURM_NTASKS is 3", env=dict(ENV, SLURM_NTASKS="3"))


def wallclock_cap_stops_every_rank():
    run_dir = os.path.join(WORKDIR, "failure_runs", "capped")
    result, seconds = mpirun(2, "--run-dir", run_dir, "--set", "train.iterations=1000000",
                             "--set", "train.max_wallclock_seconds=2", "--set", "train.eval_every=0")
    stopped = [line for line in result.stdout.splitlines() if line.startswith("stopping_early: wallclock_cap")]
    print(f"wall-clock cap of 2 s on 2 ranks: exit {result.returncode} after {seconds:.1f} s; {stopped}")
    if result.returncode != 0 or len(stopped) != 1 or "done steps:" not in result.stdout:
        failures.append(f"wallclock cap: exit {result.returncode}\n{result.stdout[-1500:]}\n{result.stderr[-1500:]}")


def shard_corrupted_mid_run():
    """A train shard that turns bad mid-run: every rank reaches it in the same step, reports it with
    its rank and the file, and the job ends (MPI_Abort) instead of waiting in a collective."""
    data = os.path.join(WORKDIR, "failure_runs", "shards")
    texts = [os.path.join(os.path.dirname(DECK), name) for name in ("train_ranks.cpp", "compare_ranks.py")]
    subprocess.run([KGPT, "prepare", "--input", *texts, *texts, *texts, "--out", data, "--prefix", "text",
                    "--shard-tokens", "4000", "--val-fraction", "0.2"], check=True, capture_output=True)
    shards = sorted(f for f in os.listdir(data) if "_train_" in f)
    if len(shards) < 3:
        failures.append(f"corrupt shard: prepare made {shards}, want 3 or more train shards")
        return
    job, output = start_long_run(os.path.join(WORKDIR, "failure_runs", "corrupt"), "step:1/",
                                 "--set", f"data.train_files={data}/text_train_*.bin",
                                 "--set", f"data.val_files={data}/text_val_*.bin")
    victim = os.path.join(data, shards[-1])
    with open(victim, "r+b") as f:
        f.truncate(1000)
    try:
        rest, _ = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        failures.append("corrupt shard: the job still ran 60 s after a shard was truncated")
        return
    text = "".join(output) + rest
    reports = re.findall(r"kgpt train: error: rank (\d+) \([^)]*\): (.*)", text)
    print(f"corrupt shard mid-run: exit {job.returncode}; reports: {reports}")
    if job.returncode == 0 or not reports or not all(victim in message for _, message in reports):
        failures.append("corrupt shard: want a non-zero exit and messages naming the rank and " + victim + "\n" +
                        text[-2000:])


wallclock_cap_stops_every_rank()
shard_corrupted_mid_run()
kill_one_rank_mid_run()

for message in failures:
    print("FAIL:", message)
sys.exit(1 if failures else 0)
