"""Helpers for the tests that start `kgpt train` on several MPI ranks and act on one rank from outside
(test_failures.py, test_watchdog.py)."""

import os
import signal
import subprocess
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
ENV.pop("SLURM_NTASKS", None)


def rank_of(pid):
    """The MPI rank of process `pid` (from its environment), or None when it is not a rank."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        for item in f.read().split(b"\0"):
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                return int(item.split(b"=", 1)[1])
    return None


def rank_pids(run_dir):
    """{rank: pid} of the ranks whose command line names `run_dir`."""
    ranks = {}
    for pid in subprocess.run(["pgrep", "-f", run_dir], capture_output=True, text=True).stdout.split():
        try:
            rank = rank_of(int(pid))
        except OSError:
            continue
        if rank is not None:
            ranks[rank] = int(pid)
    return ranks


def alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def ranks_left(ranks, seconds=5):
    """The pids of `ranks` ({rank: pid}) still running `seconds` after their job ended, killed. mpiexec
    can return while a rank it ended is still being torn down, so each gets a few seconds to go."""
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in ranks.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in ranks.values() if alive(pid)]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def start_train(mpiexec, kgpt, ranks, deck, workdir, args, marker):
    """Starts `kgpt train` on `ranks` ranks with stdout and stderr merged; returns the job and its
    lines up to and including the first that starts with `marker`."""
    command = [mpiexec, "--oversubscribe", "-n", str(ranks), kgpt, "train", deck, *args]
    job = subprocess.Popen(command, cwd=workdir, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = []
    for line in job.stdout:
        output.append(line)
        if line.startswith(marker):
            break
    return job, output


def finish(job, output, timeout):
    """Waits up to `timeout` s for `job`; returns (its whole output, seconds waited, ended)."""
    start = time.monotonic()
    try:
        rest, _ = job.communicate(timeout=timeout)
        ended = True
    except subprocess.TimeoutExpired:
        job.kill()
        rest, _ = job.communicate()
        ended = False
    return "".join(output) + (rest or ""), time.monotonic() - start, ended
