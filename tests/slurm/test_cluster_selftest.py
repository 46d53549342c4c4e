#!/usr/bin/python3
"""Self-test of tests/slurm/slurm_cluster.py: a real single-node Slurm on localhost.

    /usr/bin/python3 tests/slurm/test_cluster_selftest.py [-v] [unittest options]

Needs root, Debian's slurm-wlm and munge, and mpicc (libopenmpi-dev). Exit code 0 on success.
KGPT_SLURM_KEEP=1 keeps the cluster's temporary folder (configs, logs, job outputs) for a look.

Checks, on one cluster: an 8-task `srun --mpi=pmix` MPI job on 8 fake GPUs (8 distinct ranks, world
size 8, local ranks 0-7, CUDA_VISIBLE_DEVICES=0,...,7); a job that exits 3, requeues itself and
completes on its second run; `scancel --signal=USR1 --batch` reaching a bash trap in the batch
shell; an array job; wait() timing out with the job's output in the message; and a second cluster
running at the same time as the first.
"""

import os
import re
import shutil
import subprocess
import sys
import time
import unittest
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slurm_cluster import SlurmCluster, SlurmError  # noqa: E402

MPI_HELLO_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int rank, size, local, sum;
  MPI_Comm node;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const char *procid = getenv("SLURM_PROCID"), *cvd = getenv("CUDA_VISIBLE_DEVICES");
  printf("hello rank=%d size=%d local=%d sum=%d procid=%s cvd=%s\n", rank, size, local, sum,
         procid ? procid : "-", cvd ? cvd : "-");
  MPI_Comm_free(&node);
  MPI_Finalize();
  return 0;
}
"""

MPI_JOB = """#!/bin/bash
#SBATCH --job-name=selftest-mpi
#SBATCH --nodes=1
#SBATCH --ntasks=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=2
#SBATCH --exclusive
#SBATCH --time=00:05:00
set -euo pipefail
# Slurm 22.05's srun does not take --cpus-per-task from the allocation; this passes it on.
export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
echo "batch: ntasks=$SLURM_NTASKS cpus_per_task=$SLURM_CPUS_PER_TASK gpus=${SLURM_JOB_GPUS:-none}"
srun --mpi=pmix "$1"
"""

REQUEUE_JOB = """#!/bin/bash
#SBATCH --job-name=selftest-requeue
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --time=00:05:00
restart=${SLURM_RESTART_COUNT:-0}
echo "run restart=$restart job=$SLURM_JOB_ID"
if [[ $restart -eq 0 ]]; then
  srun bash -c 'exit 3'         # a step that asks to be requeued, as kgpt does after a checkpoint
  status=$?
  echo "step exit code $status; requeueing"
  scontrol requeue "$SLURM_JOB_ID" || exit 4
  exit "$status"                # Slurm usually kills the script first (KillWait)
fi
echo "second run done"
exit 0
"""

SIGNAL_JOB = """#!/bin/bash
#SBATCH --job-name=selftest-signal
#SBATCH --time=00:05:00
#SBATCH --signal=B:USR1@120
got=0
trap 'echo "trap USR1 in batch shell"; got=1' USR1
echo "ready $$"
for _ in $(seq 600); do
  sleep 0.1 &                   # bash runs a trap only between commands: wait in the background
  wait $!
  [[ $got -eq 1 ]] && break
done
echo "leaving, got=$got"
[[ $got -eq 1 ]]
"""

ARRAY_JOB = """#!/bin/bash
#SBATCH --job-name=selftest-array
#SBATCH --time=00:05:00
echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID"
exit $(( SLURM_ARRAY_TASK_ID == 2 ? 5 : 0 ))
"""

SLEEP_JOB = """#!/bin/bash
#SBATCH --job-name=selftest-sleep
#SBATCH --time=00:05:00
echo "sleeping-marker"
sleep 300
"""


class SlurmClusterSelfTest(unittest.TestCase):
    cluster: SlurmCluster
    work: Path

    @classmethod
    def setUpClass(cls):
        t0 = time.monotonic()
        cls.cluster = SlurmCluster()
        cls.cluster.start()
        cls.addClassCleanup(cls.cluster.stop)
        cls.work = cls.cluster.root / "work"
        cls.work.mkdir()
        print(f"\n[selftest] cluster {cls.cluster.cluster_name} up in {time.monotonic() - t0:.1f} s "
              f"(ports {cls.cluster.ctld_port}/{cls.cluster.slurmd_port}, {cls.cluster.root})", flush=True)

    def setUp(self):
        self.t0 = time.monotonic()

    def tearDown(self):
        print(f"[selftest] {self.id().split('.')[-1]}: {time.monotonic() - self.t0:.1f} s", flush=True)

    def script(self, name: str, text: str) -> Path:
        path = self.work / name
        path.write_text(text)
        path.chmod(0o755)
        return path

    def submit(self, name: str, text: str, args=(), options=()) -> str:
        out = self.work / f"{name}-%j.out"
        return self.cluster.submit(self.script(name + ".sh", text), args,
                                   options=["--output", str(out), *options], cwd=self.work)

    def output(self, job: str, name: str) -> str:
        return (self.work / f"{name}-{job}.out").read_text()

    # ------------------------------------------------------------------

    def test_node(self):
        r = self.cluster.run(["sinfo", "-h", "-N", "-o", "%N %t %c %G"])
        node, state, cpus, gres = r.stdout.split()[:4]
        self.assertEqual((node, state), (self.cluster.nodename, "idle"), r.stdout)
        self.assertGreaterEqual(int(cpus), 16)
        self.assertIn("gpu:8", gres)

    def test_mpi_job_8_ranks_8_gpus(self):
        if shutil.which("mpicc") is None:
            self.fail("mpicc not found: install libopenmpi-dev")
        hello = self.work / "mpi_hello"
        src = self.work / "mpi_hello.c"
        src.write_text(MPI_HELLO_C)
        subprocess.run(["mpicc", "-O1", "-o", str(hello), str(src)], check=True)
        job = self.submit("mpi", MPI_JOB, [str(hello)])
        final = self.cluster.wait(job, timeout=90)[job]
        out = self.output(job, "mpi")
        self.assertEqual((final.state, final.exit_status), ("COMPLETED", 0), self.cluster.job_report(job))
        lines = re.findall(r"hello rank=(\d+) size=(\d+) local=(\d+) sum=(\d+) procid=(\S+) cvd=(\S+)", out)
        self.assertEqual(len(lines), 8, out)
        self.assertEqual(sorted(int(l[0]) for l in lines), list(range(8)), out)
        self.assertEqual(sorted(int(l[2]) for l in lines), list(range(8)), out)
        for rank, size, local, total, procid, cvd in lines:
            self.assertEqual((size, total, procid), ("8", "28", rank), out)
            self.assertEqual(cvd, "0,1,2,3,4,5,6,7", out)
        self.assertIn("cpus_per_task=2", out)
        self.assertEqual(final.fields.get("NumTasks"), "8")

    def test_requeue_once(self):
        job = self.submit("requeue", REQUEUE_JOB)
        final = self.cluster.wait(job, timeout=90)[job]
        out = self.output(job, "requeue")
        report = self.cluster.job_report(job)
        self.assertEqual((final.state, final.exit_status), ("COMPLETED", 0), report)
        self.assertEqual(final.restarts, 1, report)
        self.assertEqual(final.history, ["REQUEUED", "COMPLETED"], report)
        self.assertEqual(re.findall(r"run restart=(\d+)", out), ["0", "1"], out)
        self.assertIn("step exit code 3", out)
        self.assertIn("second run done", out)

    def test_signal_reaches_batch_shell(self):
        job = self.submit("signal", SIGNAL_JOB)
        deadline = time.monotonic() + 60
        out_path = self.work / f"signal-{job}.out"
        while not (out_path.exists() and "ready" in out_path.read_text()):
            self.assertLess(time.monotonic(), deadline, self.cluster.job_report(job))
            time.sleep(0.2)
        self.cluster.scancel(job, signal="USR1", batch=True)
        final = self.cluster.wait(job, timeout=60)[job]
        out = self.output(job, "signal")
        self.assertIn("trap USR1 in batch shell", out, self.cluster.job_report(job))
        self.assertIn("got=1", out)
        self.assertEqual((final.state, final.exit_status), ("COMPLETED", 0), self.cluster.job_report(job))
        self.assertEqual(final.history, ["COMPLETED"])

    def test_array_job(self):
        job = self.submit("array", ARRAY_JOB, options=["--array=0-2"])
        tasks = self.cluster.wait(job, timeout=60)
        self.assertEqual(sorted(tasks), [f"{job}_0", f"{job}_1", f"{job}_2"], tasks)
        self.assertEqual(tasks[f"{job}_0"].state, "COMPLETED")
        self.assertEqual(tasks[f"{job}_1"].state, "COMPLETED")
        self.assertEqual((tasks[f"{job}_2"].state, tasks[f"{job}_2"].exit_status), ("FAILED", 5))
        for t in tasks.values():
            self.assertEqual(t.history, [t.state], t)

    def test_wait_timeout_then_scancel(self):
        job = self.submit("sleep", SLEEP_JOB)
        with self.assertRaises(SlurmError) as ctx:
            self.cluster.wait(job, timeout=3)
        self.assertIn("sleeping-marker", str(ctx.exception))   # the job's output tail
        self.cluster.scancel(job)
        final = self.cluster.wait(job, timeout=30)[job]
        self.assertEqual(final.state, "CANCELLED")

    def test_second_cluster_at_the_same_time(self):
        with SlurmCluster() as other:
            self.assertNotEqual(other.cluster_name, self.cluster.cluster_name)
            self.assertTrue({other.ctld_port, other.slurmd_port}.isdisjoint(
                {self.cluster.ctld_port, self.cluster.slurmd_port}))
            r = subprocess.run(["srun", "-n", "2", "bash", "-c", 'echo "$SLURM_CLUSTER_NAME $SLURM_PROCID"'],
                               env=other.env, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr + other.daemon_logs())
            self.assertEqual(sorted(r.stdout.split("\n")[:2]), [f"{other.cluster_name} 0", f"{other.cluster_name} 1"])
            other_conf = other.conf
        self.assertFalse(other_conf.exists())      # removed on exit
        r = self.cluster.run(["sinfo", "-h", "-N", "-o", "%t"])
        self.assertEqual(r.stdout.strip(), "idle")  # the first cluster is untouched


if __name__ == "__main__":
    start = time.monotonic()
    program = unittest.main(exit=False, verbosity=2)
    print(f"[selftest] total {time.monotonic() - start:.1f} s", flush=True)
    sys.exit(0 if program.result.wasSuccessful() else 1)
