"""The stall watchdog (parallel.stall_timeout_s) and failed writes, on two real MPI ranks:
  - a rank stopped from outside (SIGSTOP), rank 1 and then rank 0: the job ends with exit code 4
    within the timeout plus a few seconds, the message names the silent rank, and the newest
    checkpoint and history.h5 still load;
  - a read that blocks (a train shard replaced mid-run by a FIFO nobody writes to: opening it blocks),
    on a run of one rank, on both ranks at once, and on rank 1 alone while rank 0 waits in the
    gradient averaging collective: exit code 4, the message names the whole file (its path over 300
    characters long) and each rank's phase;
  - a checkpoint write that reaches the file size limit (ulimit -f) mid-file: exit code 1, a message
    with the file and the system's error, no partial file, the previous checkpoint still the newest;
  - a run with evaluations and checkpoints under a short timeout that never trips it.

usage: test_watchdog.py KGPT MPIEXEC DECK WORKDIR   (WORKDIR holds parallel_data/)
"""

import glob
import os
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

from mpi_jobs import ENV, finish, rank_pids, ranks_left, start_train

KGPT, MPIEXEC, DECK, WORKDIR = sys.argv[1:5]
RUNS = os.path.join(WORKDIR, "watchdog_runs")
TIMEOUT = 5  # parallel.stall_timeout_s of the stall tests
HOST = re.escape(socket.gethostname())  # messages name each rank's node (MPI's processor name: the hostname)
SLACK = 5    # "a few seconds": the watchdog's wake-up interval, the abort and mpiexec's clean-up
# Steps of some 0.3 s on two ranks, so that the test acts on the run between two steps far apart.
SLOW_STEPS = ["--set", "model.d_model=128", "--set", "train.seq_len=64", "--set", "train.global_batch_tokens=8192"]
# The blocked reads' shards sit some 300 characters deeper than RUNS, as cluster paths often do: the
# message must name the whole file, wherever the checkout and its build are.
DEEP_DATA = os.path.join(RUNS, *[f"project_{i}_datasets_tokenized_with_a_long_descriptive_folder_name" for i in range(5)])
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
    return condition


def stall_message(text):
    found = re.findall(r"^kgpt train: error: stalled: (.*)$", text, re.MULTILINE)
    return found[0] if found else ""


def newest_checkpoint(run_dir):
    found = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "ckpt_*.h5")))
    return found[-1] if found else None


def outputs_still_load(name, run_dir):
    """The newest checkpoint evaluates and history.h5 reads; no temporary checkpoint is the newest."""
    checkpoint = newest_checkpoint(run_dir)
    if not check(checkpoint is not None, f"{name}: no checkpoint in {run_dir}"):
        return
    evaluated = subprocess.run([KGPT, "eval", checkpoint], cwd=WORKDIR, env=ENV, capture_output=True, text=True)
    check(evaluated.returncode == 0 and "val_loss:" in evaluated.stdout,
          f"{name}: kgpt eval {checkpoint} failed:\n{evaluated.stdout}{evaluated.stderr}")
    history = subprocess.run([KGPT, "inspect", os.path.join(run_dir, "history.h5")], cwd=WORKDIR, env=ENV,
                             capture_output=True, text=True)
    check(history.returncode == 0, f"{name}: kgpt inspect history.h5 failed:\n{history.stdout}{history.stderr}")
    print(f"{name}: {os.path.basename(checkpoint)} loads: {evaluated.stdout.strip()}")


def no_rank_left(name, ranks):
    """mpiexec has ended: within a few seconds no rank may be left, stopped or blocked."""
    left = ranks_left(ranks)
    check(not left, f"{name}: ranks {left} were still running 5 s after the job ended")


def stop_rank(victim):
    name = f"SIGSTOP to rank {victim}"
    run_dir = os.path.join(RUNS, f"stopped_rank{victim}")
    job, output = start_train(MPIEXEC, KGPT, 2, DECK, WORKDIR,
                              ["--run-dir", run_dir, *SLOW_STEPS, "--set", "train.iterations=1000000",
                               "--set", "train.eval_every=0", "--set", "run.checkpoint_every=3",
                               "--set", f"parallel.stall_timeout_s={TIMEOUT}"], "checkpoint:")
    ranks = rank_pids(run_dir)
    if not check(victim in ranks, f"{name}: could not find rank {victim} among {ranks}"):
        job.kill()
        return
    stopped_at = time.monotonic()
    os.kill(ranks[victim], signal.SIGSTOP)
    text, seconds, ended = finish(job, output, timeout=TIMEOUT + 60)
    message = stall_message(text)
    print(f"{name}: exit {job.returncode} {seconds:.1f} s after the stop (timeout {TIMEOUT} s): {message}")
    check(ended, f"{name}: the job still ran {seconds:.0f} s after the stop")
    check(job.returncode == 4, f"{name}: exit code {job.returncode}, want 4\n{text[-2000:]}")
    check(seconds <= TIMEOUT + SLACK, f"{name}: the job ended {seconds:.1f} s after the stop, want at most {TIMEOUT + SLACK}")
    check(re.search(rf"rank {victim} \({HOST}\) has not answered for [0-9.]+ s.*last heard at step \d+, phase \w+",
                    message),
          f"{name}: the message does not name rank {victim}, its step and phase:\n{text[-2000:]}")
    if victim != 0:
        with open(os.path.join(run_dir, "log.txt")) as f:
            check(f"error: stalled: {message}" in f.read(), f"{name}: log.txt lacks the message")
    no_rank_left(name, ranks)
    outputs_still_load(name, run_dir)


def write_shard(path, tokens):
    header = struct.pack("<3i", 20240520, 1, len(tokens)) + bytes(1024 - 12)
    with open(path, "wb") as f:
        f.write(header + struct.pack(f"<{len(tokens)}H", *tokens))


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()[1024:]
    return list(struct.unpack(f"<{len(data) // 2}H", data))


def blocked_read(name, world, boundary_rank, boundary_micro_step, patterns):
    """Two train shards; the first ends inside the span of `boundary_rank` in micro-step
    `boundary_micro_step` of step 8, and once the run has started the second is replaced by a FIFO
    that nobody writes to, so that opening it blocks. The message must match every regex of
    `patterns`."""
    accum, span = 8, 8192 // 8 + 1  # each rank takes local tokens + 1 per micro-step
    micro_steps = accum // world
    step = 8
    first = (((step - 1) * micro_steps + boundary_micro_step) * world + boundary_rank) * span + span // 2
    data = os.path.join(DEEP_DATA, f"shards_{name}")
    os.makedirs(data)
    source = read_tokens(os.path.join(WORKDIR, "parallel_data", "text_train_000000.bin"))
    write_shard(os.path.join(data, "text_train_000000.bin"), (source * (first // len(source) + 1))[:first])
    second = os.path.join(data, "text_train_000001.bin")
    write_shard(second, source[:20000])
    run_dir = os.path.join(RUNS, f"blocked_{name}")
    job, output = start_train(MPIEXEC, KGPT, world, DECK, WORKDIR,
                              ["--run-dir", run_dir, *SLOW_STEPS, "--set", f"data.train_files={data}/text_train_*.bin",
                               "--set", "train.iterations=1000000", "--set", "train.eval_every=0",
                               "--set", f"parallel.stall_timeout_s={TIMEOUT}"], "step:1/")
    ranks = rank_pids(run_dir)
    fifo = second + ".fifo"
    os.mkfifo(fifo)
    os.replace(fifo, second)
    text, seconds, ended = finish(job, output, timeout=TIMEOUT + 120)
    message = stall_message(text)
    steps = re.findall(r"^step:(\d+)/", text, re.MULTILINE)
    print(f"read blocked ({name}): exit {job.returncode} {seconds:.1f} s after the swap, last step "
          f"{steps[-1] if steps else '?'}: {message}")
    check(ended, f"{name}: the job still ran {seconds:.0f} s after the swap")
    check(int(steps[-1]) == step - 1 if steps else False,
          f"{name}: want the last finished step to be {step - 1} (the shard must be swapped before step {step})")
    check(job.returncode == 4, f"{name}: exit code {job.returncode}, want 4\n{text[-2000:]}")
    for pattern in patterns:
        check(re.search(pattern, message), f"{name}: the message does not match {pattern!r}:\n{text[-2000:]}")
    no_rank_left(name, ranks)
    os.remove(second)


def file_size_limit():
    """Once the first checkpoint is written, rank 0's file size limit (RLIMIT_FSIZE, what `ulimit -f`
    sets; set here on the running rank, after MPI made its own files) leaves room for history.h5 and
    the log to grow but not for the next checkpoint, whose write then fails mid-file."""
    name = "file size limit"
    run_dir = os.path.join(RUNS, "ulimit")
    every = 5
    job, output = start_train(MPIEXEC, KGPT, 2, DECK, WORKDIR,
                              ["--run-dir", run_dir, *SLOW_STEPS, "--set", "train.iterations=1000000",
                               "--set", "train.eval_every=0", "--set", f"run.checkpoint_every={every}"], "checkpoint:")
    ranks = rank_pids(run_dir)
    before = newest_checkpoint(run_dir)
    size = os.path.getsize(before)
    limit = os.path.getsize(os.path.join(run_dir, "history.h5")) + 256 * 1024
    if not check(0 in ranks and limit < size // 2, f"{name}: ranks {ranks}, checkpoint of {size} bytes: cannot test"):
        job.kill()
        return
    resource.prlimit(ranks[0], resource.RLIMIT_FSIZE, (limit, limit))
    text, seconds, ended = finish(job, output, timeout=120)
    errors = re.findall(r"^kgpt train: error.*$", text, re.MULTILINE)
    print(f"{name}: {limit} bytes (checkpoints are {size} bytes): exit {job.returncode}; {errors}")
    check(ended and job.returncode == 1, f"{name}: exit code {job.returncode}, want 1\n{text[-2000:]}")
    failed = os.path.join(run_dir, "checkpoints", f"ckpt_{2 * every:08d}.h5")
    check(len(errors) == 1 and failed in errors[0] and "File too large" in errors[0] and before in errors[0],
          f"{name}: want one message naming {failed}, 'File too large' and the newest checkpoint {before}: {errors}")
    left = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    check(left == [os.path.basename(before)], f"{name}: the checkpoint folder holds {left}")
    with open(os.path.join(run_dir, "log.txt")) as f:
        check("File too large" in f.read(), f"{name}: log.txt lacks the message")
    no_rank_left(name, ranks)
    outputs_still_load(name, run_dir)


def long_run_never_trips():
    """Evaluations, checkpoints and 2,000 steps on two ranks under a 2 s timeout (a step takes some
    10 ms): the watchdog stays quiet and the run ends normally."""
    name = "long run"
    run_dir = os.path.join(RUNS, "long")
    start = time.monotonic()
    job, output = start_train(MPIEXEC, KGPT, 2, DECK, WORKDIR,
                              ["--run-dir", run_dir, "--set", "train.iterations=2000", "--set", "train.eval_every=100",
                               "--set", "run.checkpoint_every=250", "--set", "parallel.stall_timeout_s=2"], "no marker")
    text, _, _ = finish(job, output, timeout=300)
    print(f"{name}: exit {job.returncode} after {time.monotonic() - start:.1f} s; "
          f"{re.findall(r'stall_watchdog:[^ ]+ [^)]*[)]', text)}")
    check(job.returncode == 0 and "done steps:2000" in text and "stalled" not in text,
          f"{name}: the run did not end normally:\n{text[-2000:]}")
    check("stall_watchdog:2s (heartbeats between 2 ranks)" in text, f"{name}: the log does not show the watchdog")


shutil.rmtree(RUNS, ignore_errors=True)
os.makedirs(RUNS)
stop_rank(1)
stop_rank(0)
blocked = re.escape(f"reading {DEEP_DATA}/shards_") + r"\w+/text_train_000001\.bin"
blocked_read("one_rank", 1, 0, 0, [rf"^rank 0 has made no progress for [0-9.]+ s \(step 8, phase data \({blocked}\)\)"])
blocked_read("both_ranks", 2, 0, 0, [r"^no rank has made progress for [0-9.]+ s: ",
                                     rf"rank 0 \({HOST}\) at step 8, phase data \({blocked}\) for [0-9.]+ s",
                                     rf"rank 1 \({HOST}\) at step 8, phase data \({blocked}\) for [0-9.]+ s"])
blocked_read("rank1_rank0_in_collective", 2, 1, 3, [r"^no rank has made progress for [0-9.]+ s: ",
                                                    rf"rank 0 \({HOST}\) at step 8, phase averaging for [0-9.]+ s",
                                                    rf"rank 1 \({HOST}\) at step 8, phase data \({blocked}\) for [0-9.]+ s"])
file_size_limit()
long_run_never_trips()

for message in failures:
    print("FAIL:", message)
sys.exit(1 if failures else 0)
