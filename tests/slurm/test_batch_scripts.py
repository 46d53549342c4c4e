#!/usr/bin/python3
"""The batch scripts in slurm/ on a real single-node Slurm (tests/slurm/slurm_cluster.py).

usage: test_batch_scripts.py SCENARIO KGPT_BINARY DATA_DIR STATE_DIR

SCENARIO is one of
  8xh100   slurm/8xh100.sbatch on the CPU build with 8 oversubscribed ranks, to completion; its run
           directory is kept in STATE_DIR/reference for the preempt scenario;
  preempt  the same deck and job, stopped by `scancel --signal=USR1 --batch` in the middle: the job
           checkpoints, requeues itself, resumes and ends with the same losses as the reference;
  sweep    `kgpt sweep` of 4 points and slurm/sweep.sbatch as a job array; summarize.py gives 4 rows;
  others   slurm/cpu.sbatch and slurm/multinode.sbatch (on the one node) to completion, and bad input
           to the scripts (a missing deck, a bad key, a sweep without --array): exit code 2, a message
           naming the problem, no requeue;
  stall    a rank of 8xh100.sbatch stopped with SIGSTOP: exit code 4 and the rank named, no requeue;
           with KGPT_REQUEUE_ON_STALL=1 the job requeues, resumes and completes.
DATA_DIR holds the byte shards of tests/parallel/tiny_parallel.yaml (parallel_data/). Exit code 0
when every check passes; each failure is printed.
"""
import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batch_checks import check, failures, read_text, workdir_with_data  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DECK = os.path.join(SOURCE, "tests", "parallel", "tiny_parallel.yaml")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
# 200 steps (about 10 ms each on 2 cores), so that a signal sent after step 5 lands well before the end.
STEPS = 200
TRAIN_OPTIONS = ["--set", f"train.iterations={STEPS}", "--set", "train.eval_every=50", "--set", "train.log_every=1"]


def history(run_dir):
    """Train and val columns of a run's history.h5."""
    with h5py.File(os.path.join(run_dir, "history.h5"), "r", swmr=True) as f:
        return {group: {name: f[group][name][()] for name in f[group]} for group in ("train", "val")}


def wait_for_log(cluster, job, run_dir, text, what, timeout=300):
    """Waits until the run's log.txt holds `text`; a failure ("job J <what> within N s") when the job
    leaves the queue or the time is up first."""
    deadline = time.time() + timeout
    while text not in read_text(os.path.join(run_dir, "log.txt")):
        if time.time() > deadline or not cluster.queue(job):
            check(False, f"job {job} {what} within {timeout} s")
            return
        time.sleep(0.1)


def job_environment(kgpt):
    """What the batch scripts need here: the binary, the checkout, and MPI settings for a CI container."""
    return {
        "KGPT": kgpt,
        "KGPT_HOME": SOURCE,
        # Tests run as root in CI; Open MPI refuses root without these.
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        # 8 ranks share 2 cores: ranks waiting in MPI must give up the core instead of spinning.
        "OMPI_MCA_mpi_yield_when_idle": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }


def only_run_dir(runs):
    found = sorted(os.listdir(runs)) if os.path.isdir(runs) else []
    check(len(found) == 1, f"one run directory in {runs}: {found}")
    return os.path.join(runs, found[0]) if found else runs


def scenario_8xh100(cluster, kgpt, data_dir, state_dir, tmp):
    work = workdir_with_data(tmp, data_dir)
    runs = os.path.join(work, "runs")
    job = cluster.submit(os.path.join(SOURCE, "slurm", "8xh100.sbatch"), [DECK, *TRAIN_OPTIONS,
                         "--set", f"run.out_dir={runs}"], cwd=work, env=job_environment(kgpt))
    final = cluster.wait(job, timeout=420)[job]
    out = read_text(os.path.join(work, f"kgpt-{job}.out"))
    print(out[-3000:], flush=True)
    check(final.state == "COMPLETED" and final.exit_status == 0, f"8xh100 job {job}: {cluster.job_report(job)}")
    run_dir = only_run_dir(runs)
    check(os.path.basename(run_dir) == f"tiny_parallel-{job}", f"run directory named after the job: {run_dir}")
    log = read_text(os.path.join(run_dir, "log.txt"))
    check("world_size:8 grad_accum_steps:1 micro_batch:4x32 ranks_per_node:8" in log,
          "8 ranks on one node, 1 micro-step each")
    check(f"step:{STEPS}/{STEPS} val_loss:" in log, f"the run reached step {STEPS}")
    check(f"== kgpt job {job} (kgpt) on " in out and "8 tasks, 12 CPUs per task, restart 0" in out,
          "the job header names the job, its 8 tasks and 12 CPUs per task")
    h = history(run_dir)
    check(list(h["train"]["step"]) == list(range(1, STEPS + 1)), f"{STEPS} train rows")
    reference = os.path.join(state_dir, "reference")
    shutil.rmtree(reference, ignore_errors=True)
    shutil.copytree(run_dir, reference)


def scenario_preempt(cluster, kgpt, data_dir, state_dir, tmp):
    reference = os.path.join(state_dir, "reference")
    if not check(os.path.isfile(os.path.join(reference, "history.h5")), f"reference run in {reference}"):
        return
    work = workdir_with_data(tmp, data_dir)
    runs = os.path.join(work, "runs")
    job = cluster.submit(os.path.join(SOURCE, "slurm", "8xh100.sbatch"), [DECK, *TRAIN_OPTIONS,
                         "--set", f"run.out_dir={runs}"], cwd=work, env=job_environment(kgpt))
    run_dir = os.path.join(runs, f"tiny_parallel-{job}")
    # Signal the batch shell, as --signal=B:USR1@N does before the time limit, once step 5 is done.
    wait_for_log(cluster, job, run_dir, f"step:5/{STEPS} train_loss:", "reached step 5")
    cluster.scancel(job, signal="USR1", batch=True)
    final = cluster.wait(job, timeout=600)[job]
    out = read_text(os.path.join(work, f"kgpt-{job}.out"))
    print(out[-4000:], flush=True)
    check(final.state == "COMPLETED" and final.exit_status == 0, f"preempted job {job} completed: {final}")
    # The job-completion log has one line per end of the job: the requeued run, then the last one.
    check(final.restarts == 1 and len(final.history) == 2 and final.history[-1] == "COMPLETED",
          f"job {job} was requeued once: restarts {final.restarts}, ends {final.history}")
    check("SIGUSR1 received" in out and "forwarding it to the job step" in out, "the batch shell forwarded SIGUSR1")
    check(f"checkpointed (exit code 3); requeueing job {job} (restart 1)" in out, "the batch shell requeued the job")
    check("restart 1," in out, "the second start is restart 1")
    log = read_text(os.path.join(run_dir, "log.txt"))
    check("preempted: signal 10" in log, "kgpt stopped on SIGUSR1 with a checkpoint")
    check("resumed_from:" in log, "the requeued job resumed from the checkpoint")
    check(only_run_dir(runs) == run_dir, "the requeued job used the same run directory")
    got, want = history(run_dir), history(reference)
    check(list(got["train"]["step"]) == list(range(1, STEPS + 1)), f"{STEPS} train rows, none twice: {got['train']['step']}")
    stopped = [line for line in log.splitlines() if line.startswith("preempted:")]
    print(f"stopped at: {stopped}", flush=True)
    for group, column in (("train", "loss"), ("val", "loss"), ("val", "bpb")):
        same = np.array_equal(got[group][column], want[group][column])
        check(same, f"{group}/{column} equals the uninterrupted run: {got[group][column]} vs {want[group][column]}")
    print(f"final train loss {got['train']['loss'][-1]!r} (uninterrupted {want['train']['loss'][-1]!r}), "
          f"final val loss {got['val']['loss'][-1]!r} (uninterrupted {want['val']['loss'][-1]!r})", flush=True)


def scenario_sweep(cluster, kgpt, data_dir, state_dir, tmp):
    work = workdir_with_data(tmp, data_dir)
    sweep_file = os.path.join(work, "lr.yaml")
    with open(sweep_file, "w") as f:
        f.write(f"base: {DECK}\nname: lr\nset:\n  train.iterations: 6\n  train.eval_every: 3\n"
                "grid:\n  optim.matrix_lr: [0.02, 0.04]\n  optim.scalar_lr: [0.02, 0.04]\n")
    sweep_dir = os.path.join(work, "sweeps", "lr")
    made = subprocess.run([kgpt, "sweep", sweep_file, "--out", sweep_dir, "--world-size", "2"], cwd=work,
                          capture_output=True, text=True, timeout=60)
    print(made.stdout, made.stderr, flush=True)
    if not check(made.returncode == 0, f"kgpt sweep: {made.stderr}"):
        return
    check("submit: sbatch --array=0-3%4 slurm/sweep.sbatch" in made.stdout, "kgpt sweep prints the sbatch line")
    # The script asks for one 8-GPU node per point; CPU points take 2 ranks and no GPU instead.
    job = cluster.submit(os.path.join(SOURCE, "slurm", "sweep.sbatch"), [sweep_dir],
                         options=["--array=0-3%2", "--gres=none", "--ntasks-per-node=2", "--cpus-per-task=1"],
                         cwd=work, env=job_environment(kgpt))
    tasks = cluster.wait(job, timeout=420)
    check(sorted(tasks) == [f"{job}_{i}" for i in range(4)] and
          all(t.state == "COMPLETED" and t.exit_status == 0 for t in tasks.values()),
          f"4 array tasks completed: {cluster.job_report(job)}")
    for i in range(4):
        check(os.path.isfile(os.path.join(sweep_dir, "runs", f"{i:03d}", "history.h5")), f"point {i} has a history")
    summary_csv = os.path.join(work, "summary.csv")
    summary = subprocess.run([PYTHON, os.path.join(SOURCE, "postprocess", "summarize.py"), sweep_dir, "--csv",
                              summary_csv], capture_output=True, text=True, timeout=120)
    print(summary.stdout, summary.stderr, flush=True)
    check(summary.returncode == 0, f"summarize.py: {summary.stderr}")
    rows = list(csv.DictReader(open(summary_csv))) if os.path.isfile(summary_csv) else []
    check(len(rows) == 4, f"the summary has 4 rows: {rows}")
    check([r["run"] for r in rows] == ["lr/000", "lr/001", "lr/002", "lr/003"], f"rows by point: {rows}")
    check([(r["optim.matrix_lr"], r["optim.scalar_lr"]) for r in rows] ==
          [("0.02", "0.02"), ("0.02", "0.04"), ("0.04", "0.02"), ("0.04", "0.04")], "the swept values of each row")
    check(all(r["steps"] == "6" and r["final_val_loss"] for r in rows), "every point ran 6 steps and evaluated")
    check(len({r["final_train_loss"] for r in rows}) == 4, "the 4 points trained differently")


def scenario_others(cluster, kgpt, data_dir, state_dir, tmp):
    work = workdir_with_data(tmp, data_dir)
    runs = os.path.join(work, "runs")
    short = ["--set", "train.iterations=5", "--set", f"run.out_dir={runs}"]
    env = job_environment(kgpt)
    version = subprocess.run([kgpt, "--version"], env={**os.environ, **env}, capture_output=True, text=True).stdout
    kernel = next((line.split("kernel ")[1].split(",")[0] for line in version.splitlines()
                   if line.startswith("BLAS: ") and "kernel " in line), "")
    good = []
    for script, options, ranks, name in (("cpu.sbatch", [], 4, "kgpt-cpu"),
                                          ("multinode.sbatch", ["--nodes=1"], 8, "kgpt-multinode")):
        job = cluster.submit(os.path.join(SOURCE, "slurm", script), [DECK, *short], options=options, cwd=work, env=env)
        final = cluster.wait(job, timeout=300)[job]
        good.append(f"tiny_parallel-{job}")
        check(final.state == "COMPLETED" and final.exit_status == 0, f"{script} job {job}: {cluster.job_report(job)}")
        log = read_text(os.path.join(runs, f"tiny_parallel-{job}", "log.txt"))
        check(f"world_size:{ranks} " in log and "step:5/5 val_loss:" in log, f"{script}: {ranks} ranks, 5 steps")
        # Under srun every rank chooses the BLAS kernel as kgpt alone does here (core/blas.hpp).
        blas = [line for line in log.splitlines() if line.startswith("blas: ")]
        check(len(blas) == 1 and blas[0].endswith("; every rank the same") and f"kernel {kernel}," in blas[0],
              f"{script}: every rank runs the BLAS kernel kgpt runs alone ({kernel}): {blas}")
        check(f"== kgpt job {job} ({name})" in read_text(os.path.join(work, f"{name}-{job}.out")), f"{script} output file")

    # Bad input ends the job with exit code 2 and one message naming the problem; nothing is requeued.
    bad = [("8xh100.sbatch", ["missing.yaml"], [], "kgpt job: error: deck 'missing.yaml' not found"),
           ("8xh100.sbatch", [DECK, "--set", "train.iteratons=5"], [],
            "unknown key 'train.iteratons' (did you mean 'train.iterations'?)"),
           ("sweep.sbatch", [work], [], "slurm/sweep.sbatch runs one point per array task"),
           ("sweep.sbatch", [work], ["--array=0"], f"'{work}' is not a sweep folder")]
    for script, args, options, message in bad:
        job = cluster.submit(os.path.join(SOURCE, "slurm", script), args, options=options, cwd=work, env=env)
        records = cluster.wait(job, timeout=120)
        final = next(iter(records.values()))
        out = read_text(final.stdout or "")
        check(final.state == "FAILED" and final.exit_status == 2 and final.restarts == 0,
              f"{script} {args}: exit 2 without requeue: {final.state} {final.exit_code} restarts {final.restarts}")
        check(message in out, f"{script} {args}: the output says {message!r}: {out[-1500:]}")
    check(sorted(os.listdir(runs)) == sorted(good), f"bad input made no run directory: {os.listdir(runs)}")


def rank_pid(job, rank):
    """The pid of `rank` of `job`'s kgpt step: a kgpt process with that SLURM_PROCID whose command line
    carries the job's run suffix (srun's own command line carries it too, but srun is not kgpt)."""
    found = subprocess.run(["pgrep", "-f", "--", f"--run-suffix -{job} "], capture_output=True, text=True).stdout.split()
    for pid in found:
        try:
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")) != "kgpt":
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"SLURM_PROCID={rank}".encode() in f.read().split(b"\0"):
                    return int(pid)
        except OSError:
            continue
    return None


def scenario_stall(cluster, kgpt, data_dir, state_dir, tmp):
    """A rank stopped with SIGSTOP: the stall watchdog ends the job with exit code 4 and a message
    naming the rank; the batch script does not requeue it, unless KGPT_REQUEUE_ON_STALL=1, where the
    requeued job resumes and completes."""
    work = workdir_with_data(tmp, data_dir)
    runs = os.path.join(work, "runs")
    timeout = 5
    for requeue in (False, True):
        env = job_environment(kgpt)
        if requeue:
            env["KGPT_REQUEUE_ON_STALL"] = "1"
        job = cluster.submit(os.path.join(SOURCE, "slurm", "8xh100.sbatch"),
                             [DECK, *TRAIN_OPTIONS, "--set", f"run.out_dir={runs}", "--set", "run.checkpoint_every=5",
                              "--set", f"parallel.stall_timeout_s={timeout}"], cwd=work, env=env)
        run_dir = os.path.join(runs, f"tiny_parallel-{job}")
        wait_for_log(cluster, job, run_dir, f"checkpoint:{run_dir}/checkpoints/ckpt_00000005.h5",
                     "wrote its step-5 checkpoint")
        victim = rank_pid(job, 3)
        if not check(victim is not None, f"job {job}: found the process of rank 3"):
            cluster.scancel(job)
            continue
        stopped_at = time.time()
        os.kill(victim, signal.SIGSTOP)
        final = cluster.wait(job, timeout=600)[job]
        waited = time.time() - stopped_at
        out = read_text(os.path.join(work, f"kgpt-{job}.out"))
        print(out[-3000:], flush=True)
        log = read_text(os.path.join(run_dir, "log.txt"))
        named = f"stalled: rank 3 ({socket.gethostname()}) has not answered for"
        check("kgpt train: error: " + named in out, f"job {job}: the output names rank 3 and its node")
        check("error: " + named in log, f"job {job}: log.txt names rank 3 and its node")
        check("kgpt job: error: the stall watchdog ended the job (exit code 4)" in out, f"job {job}: the script says why")
        if not requeue:
            print(f"stall without requeue: job {job} ended within {waited:.1f} s of the stop (timeout {timeout} s)",
                  flush=True)
            check(final.state == "FAILED" and final.exit_status == 4 and final.restarts == 0,
                  f"job {job}: exit code 4 without requeue: {final.state} {final.exit_code} restarts {final.restarts}")
            check("not requeued (KGPT_REQUEUE_ON_STALL=1 requeues a stalled job)" in out, f"job {job}: not requeued")
        else:
            check(final.state == "COMPLETED" and final.exit_status == 0 and final.restarts == 1,
                  f"job {job}: requeued once, then completed: {final}")
            check(f"stalled (exit code 4, KGPT_REQUEUE_ON_STALL=1); requeueing job {job} (restart 1)" in out,
                  f"job {job}: the script requeued the stalled job")
            check("resumed_from:" in log and f"step:{STEPS}/{STEPS} val_loss:" in log,
                  f"job {job}: the requeued job resumed and finished")
            check(list(history(run_dir)["train"]["step"]) == list(range(1, STEPS + 1)),
                  f"job {job}: {STEPS} train rows, none twice")


SCENARIOS = {"8xh100": scenario_8xh100, "preempt": scenario_preempt, "sweep": scenario_sweep,
             "others": scenario_others, "stall": scenario_stall}


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in SCENARIOS:
        print(__doc__, file=sys.stderr)
        return 2
    scenario, kgpt, data_dir, state_dir = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.makedirs(state_dir, exist_ok=True)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix=f"slurm-{scenario}-") as tmp:
        with SlurmCluster(os.path.join(tmp, "cluster")) as cluster:
            SCENARIOS[scenario](cluster, kgpt, data_dir, state_dir, tmp)
    for failure in failures:
        print("FAILED:", failure)
    print(f"{scenario}: {'passed' if not failures else 'failed'} in {time.time() - started:.0f} s, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
