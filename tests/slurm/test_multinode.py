#!/usr/bin/python3
"""kgpt across machines: slurm/multinode.sbatch on a Slurm cluster of 2 nodes, each a network
namespace of this machine with its own address, hostname and slurmd (multinode_cluster.py), Open
MPI over TCP on the nodes' links, and faults of a node, a link and a daemon.

usage: test_multinode.py SCENARIO KGPT_BINARY DATA_DIR WORKDIR

SCENARIO is one of
  run        sbatch --nodes=2 of slurm/multinode.sbatch (2 ranks a node) trains the parallel tests'
             deck: its losses equal the single-rank run's to 1e-5, each node's ranks have local ranks
             0 and 1, the log names the nodes, and each node's link carried at least the gradient
             bytes of every step both ways (Open MPI's TCP transport, forced);
  node       node2 killed mid-step (kill -9 of every process in it): the ranks on node1 end within
             parallel.stall_timeout_s and a few seconds with a message naming a rank of node2 and its
             node; the newest checkpoint and history.h5 read back with h5py; the job resubmitted on
             node1 alone (KGPT_CONTINUE_JOB) resumes at world size 2 and ends with losses within 1e-5
             of the uninterrupted run on 2 nodes;
  partition  node2's switch port down during training: every rank on both nodes ends within the
             timeout and a few seconds, with exit code 4 and a message naming the phase and the peer;
             the outputs read back;
  slurmd     node2's slurmd killed mid-run: Slurm declares the node down, its SIGTERM makes kgpt write a
             checkpoint, and the job is requeued; once the slurmd is back the job resumes from that
             checkpoint on 2 nodes (and is cancelled some steps later);
  slow       the links shaped to 1 Gbit/s and to 100 Mbit/s: training goes on, and the step lines'
             averaging time grows as the rate falls;
  teardown   a test process killed (SIGKILL) with its cluster running leaves no namespace, link,
             bridge or daemon behind, and a second cluster beside it runs on.
Every scenario also checks that its own cluster left no namespace behind.
The uninterrupted 2-node run of `run` is kept in WORKDIR/multinode_state for `node`.
Exit code 77 (a skip) where this machine refuses network namespaces.
"""

import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batch_checks import check, failures, read_text, workdir_with_data  # noqa: E402
from multinode_cluster import MultiNodeCluster  # noqa: E402
from netbench import NamespacesRefused  # noqa: E402

SCENARIO, KGPT, DATA_DIR, WORKDIR = sys.argv[1:5]
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(SOURCE, "slurm", "multinode.sbatch")
DECK = os.path.join(SOURCE, "tests", "parallel", "tiny_parallel.yaml")
STATE = os.path.join(WORKDIR, "multinode_state")
STEPS = 40
STALL = 5  # parallel.stall_timeout_s of the fault runs
SLACK = 8  # the watchdog's wake-up, the abort and srun's clean-up
TRAIN = ["--set", f"train.iterations={STEPS}", "--set", "train.eval_every=20", "--set", "train.log_every=1",
         "--set", "run.checkpoint_every=5", "--set", "run.checkpoint_keep_last=20",
         "--set", f"parallel.stall_timeout_s={STALL}"]
TWO_NODES = ["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1"]


def job_environment(**extra):
    """What the jobs need: the binary, the checkout, and Open MPI over TCP on the nodes' links only
    (no shared memory between ranks, so every byte between nodes crosses a link)."""
    env = {"KGPT": KGPT, "KGPT_HOME": SOURCE, "OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "eth0",
           "OMPI_MCA_mpi_yield_when_idle": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.update(extra)
    return env


def submit_folder(name):
    return workdir_with_data(WORKDIR, DATA_DIR, prefix=f"{name}-")


def submit(cluster, work, options=TWO_NODES, extra=(), **env):
    return cluster.submit(SCRIPT, [DECK, *TRAIN, "--set", f"run.out_dir={work}/runs", *extra], options=list(options),
                          cwd=work, env=job_environment(**env))


def run_dir_of(work, tag):
    return os.path.join(work, "runs", f"tiny_parallel-{tag}")


def history(run_dir):
    # SWMR: a run that was killed never closed the file, whose flags then still say it is being written.
    with h5py.File(os.path.join(run_dir, "history.h5"), "r", swmr=True) as f:
        return {name: f["train"][name][()] for name in f["train"]}


def outputs_read_back(what, run_dir):
    """The newest checkpoint's tensors are finite and history.h5's steps run 1..N without a gap."""
    found = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "ckpt_*.h5")))
    if not check(found, f"{what}: no checkpoint in {run_dir}"):
        return 0
    with h5py.File(found[-1], "r") as f:
        step = int(f["state/step"][()])
        finite = all(np.isfinite(f["params"][name][()]).all() for name in f["params"])
    check(finite, f"{what}: {found[-1]} holds non-finite values")
    steps = list(history(run_dir)["step"])
    check(steps == list(range(1, len(steps) + 1)) and len(steps) >= step,
          f"{what}: history.h5 rows {steps[:3]}..{steps[-3:]} against the checkpoint of step {step}")
    print(f"{what}: newest checkpoint {os.path.basename(found[-1])} (step {step}) and {len(steps)} history rows "
          "read back", flush=True)
    return step


def wait_for_step(cluster, job, run_dir, step, timeout=240):
    deadline = time.time() + timeout
    while f"step:{step}/" not in read_text(os.path.join(run_dir, "log.txt")):
        if time.time() > deadline or not cluster.queue(job):
            check(False, f"job {job} did not reach step {step}:\n{cluster.job_report(job)}")
            return False
        time.sleep(0.05)
    return True


def kgpt_pids(cluster, node):
    pids = []
    for pid in cluster.node_pids(node):
        cmdline = read_text(f"/proc/{pid}/cmdline").split("\0")
        if cmdline and os.path.basename(cmdline[0]) == "kgpt":
            pids.append(pid)
    return pids


def wait_until_gone(cluster, nodes, since, limit):
    """Seconds from `since` until no kgpt process is left on `nodes` (None after `limit`)."""
    while time.time() - since < limit:
        if not any(kgpt_pids(cluster, n) for n in nodes):
            return time.time() - since
        time.sleep(0.1)
    return None


def relative_difference(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)) / np.abs(np.asarray(b))))


def scenario_run(cluster):
    work = submit_folder("run")
    # The single-rank run on this machine, outside Slurm.
    single = os.path.join(work, "single")
    r = subprocess.run([KGPT, "train", DECK, "--run-dir", single, *TRAIN], cwd=work, capture_output=True, text=True,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1"), timeout=300)
    check(r.returncode == 0, f"the single-rank run failed:\n{r.stderr[-2000:]}")
    before = {n: cluster.net.counters(n) for n in cluster.node_names}
    job = submit(cluster, work)
    final = cluster.wait(job, timeout=300)[job]
    after = {n: cluster.net.counters(n) for n in cluster.node_names}
    out = read_text(os.path.join(work, f"kgpt-multinode-{job}.out"))
    if not check(final.state == "COMPLETED" and final.exit_status == 0, f"2-node job {job}: {cluster.job_report(job)}"):
        return
    run_dir = run_dir_of(work, job)
    log = read_text(os.path.join(run_dir, "log.txt"))
    check("on node[1-2]: 2 node(s), 4 tasks" in out, f"the job header names 2 nodes and 4 tasks:\n{out[:400]}")
    check("world_size:4 grad_accum_steps:2 micro_batch:4x32 ranks_per_node:2" in log, "4 ranks, 2 a node")
    check("placement: node1 ranks 0-1 local 0-1, node2 ranks 2-3 local 0-1" in log,
          f"the log names the nodes and each node's ranks have local ranks 0 and 1: "
          f"{re.findall(r'placement: .*', log)}")
    rows, reference = history(run_dir), history(single)
    error = relative_difference(rows["loss"], reference["loss"])
    print(f"2 nodes x 2 ranks against 1 rank: {len(rows['loss'])} steps, largest relative loss difference {error:.2e}",
          flush=True)
    check(len(rows["loss"]) == STEPS and error <= 1e-5, f"2-node losses differ from 1 rank's by {error:.2e}")
    # Every step's all-reduce must bring each node the other's partial sums of the whole buffer.
    gradient_bytes = int(np.sum(rows["allreduce_bytes"]))
    for node in cluster.node_names:
        moved = {k: after[node][k] - before[node][k] for k in ("rx_bytes", "tx_bytes")}
        print(f"{node}'s link: {moved['rx_bytes']:,} bytes in, {moved['tx_bytes']:,} out; the steps averaged "
              f"{gradient_bytes:,} bytes of gradients", flush=True)
        check(min(moved.values()) >= gradient_bytes,
              f"{node}'s link carried {moved} bytes, less than the {gradient_bytes:,} gradient bytes of the steps")
    shutil.rmtree(STATE, ignore_errors=True)
    shutil.copytree(run_dir, os.path.join(STATE, "two_nodes"))


def reference_losses():
    path = os.path.join(STATE, "two_nodes")
    if not check(os.path.isfile(os.path.join(path, "history.h5")), f"the uninterrupted 2-node run in {path}"):
        return None
    return history(path)["loss"]


def scenario_node(cluster):
    reference = reference_losses()
    if reference is None:
        return
    work = submit_folder("node")
    job = submit(cluster, work)
    run_dir = run_dir_of(work, job)
    if not wait_for_step(cluster, job, run_dir, 12):
        return
    killed = time.time()
    cluster.net.kill_all("node2")
    gone = wait_until_gone(cluster, ["node1"], killed, STALL + SLACK + 10)
    print(f"node2 killed: the ranks on node1 ended {gone if gone is None else round(gone, 1)} s later", flush=True)
    check(gone is not None and gone <= STALL + SLACK, f"node1's ranks still ran {STALL + SLACK} s after node2 died")
    out_file = os.path.join(work, f"kgpt-multinode-{job}.out")
    deadline = time.time() + 60
    while time.time() < deadline and cluster.queue(job).get(job) in ("RUNNING", "COMPLETING", "CONFIGURING"):
        time.sleep(0.5)
    named = re.search(r"stalled: (rank [23] \(node2\) has not answered for [0-9.]+ s[^;]*)", read_text(out_file))
    print(f"the message: {named.group(1) if named else None}", flush=True)
    check(named is not None, f"the job's output names no rank of node2:\n{read_text(out_file)[-3000:]}")
    check("error: stalled: rank" in read_text(os.path.join(run_dir, "log.txt")), "log.txt holds the stall message")
    if cluster.queue(job):
        cluster.scancel(job, check=False)  # Slurm requeued it for the lost node: the resubmission takes over
        cluster.wait(job, timeout=60)
    step = outputs_read_back("after node2 died", run_dir)
    # Resubmitted on node1 alone: the same run, from its newest checkpoint, at world size 2.
    again = submit(cluster, work, options=["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1"],
                   KGPT_CONTINUE_JOB=job)
    final = cluster.wait(again, timeout=300)[again]
    log = read_text(os.path.join(run_dir, "log.txt"))
    if not check(final.state == "COMPLETED", f"the resubmitted job {again}: {cluster.job_report(again)}"):
        return
    check(f"resumed_from:{run_dir}/checkpoints/ckpt_{step:08d}.h5" in log and "world_size:2 grad_accum_steps:4" in log,
          f"the resubmitted job resumes from step {step} at world size 2")
    check(f"continuing the run of job {job}" in read_text(os.path.join(work, f"kgpt-multinode-{again}.out")),
          "the resubmitted job says which run it continues")
    losses = history(run_dir)["loss"]
    error = relative_difference(losses, reference)
    print(f"resumed from step {step} on node1 alone: {len(losses)} steps, largest relative loss difference from the "
          f"uninterrupted 2-node run {error:.2e}", flush=True)
    check(len(losses) == STEPS and error <= 1e-5, f"the resumed losses differ by {error:.2e} relative")
    cluster.restart_slurmd("node2")


def scenario_partition(cluster):
    work = submit_folder("partition")
    job = submit(cluster, work, extra=["--set", "train.iterations=100000"])
    run_dir = run_dir_of(work, job)
    if not wait_for_step(cluster, job, run_dir, 12):
        return
    cut = time.time()
    cluster.net.link("node2", up=False)
    gone = wait_until_gone(cluster, ["node1", "node2"], cut, STALL + SLACK + 10)
    cluster.net.link("node2", up=True)
    print(f"node2's link down: every rank ended {gone if gone is None else round(gone, 1)} s later", flush=True)
    check(gone is not None and gone <= STALL + SLACK,
          f"ranks still ran {STALL + SLACK} s after the partition: {kgpt_pids(cluster, 'node1')} "
          f"{kgpt_pids(cluster, 'node2')}")
    cluster.wait(job, timeout=120)
    out = read_text(os.path.join(work, f"kgpt-multinode-{job}.out"))
    message = re.search(r"error: stalled: (.*)", out)
    print(f"the message: {message.group(1)[:400] if message else None}", flush=True)
    check(message is not None and re.search(r"rank [23] \(node2\) has not answered", message.group(1))
          and re.search(r"rank 0 \(node1\) is at step \d+, phase \w+", message.group(1)),
          f"the message names the peer and the phase:\n{out[-3000:]}")
    check("the stall watchdog ended the job (exit code 4)" in out, "the batch script reports exit code 4")
    outputs_read_back("after the partition", run_dir)


def scenario_slurmd(cluster):
    work = submit_folder("slurmd")
    # Long enough that Slurm finds the node silent while the job still runs; cancelled once resumed.
    # KGPT_MAX_REQUEUES=1: Slurm's requeue is the only one, so the test's scancel ends the job.
    job = submit(cluster, work, extra=["--set", "train.iterations=100000"], KGPT_MAX_REQUEUES="1")
    run_dir = run_dir_of(work, job)
    if not wait_for_step(cluster, job, run_dir, 12):
        return
    cluster.kill_slurmd("node2")
    # Slurm finds the node silent, declares it down, ends the job's step (SIGTERM: kgpt checkpoints)
    # and requeues the job (--requeue); it waits for node2.
    deadline = time.time() + 120
    while time.time() < deadline and not (cluster.node_states().get("node2", "").startswith("down")
                                          and cluster.queue(job).get(job) == "PENDING"):
        time.sleep(0.5)
    states, queued = cluster.node_states(), cluster.queue(job)
    print(f"node2's slurmd killed: Slurm sees {states}; the job is {queued}", flush=True)
    check(states.get("node2", "").startswith("down") and queued.get(job) == "PENDING",
          f"Slurm did not declare node2 down and requeue the job: {states} {queued}\n{cluster.job_report(job)}")
    log = read_text(os.path.join(run_dir, "log.txt"))
    saved = re.findall(r"^preempted: signal 15 step:(\d+)/", log, re.MULTILINE)
    check(len(saved) == 1, f"kgpt did not checkpoint on Slurm's SIGTERM: {saved}")
    step = outputs_read_back("while node2 is down", run_dir)
    cluster.restart_slurmd("node2")
    # Back on 2 nodes: the run goes on from the checkpoint of the SIGTERM.
    resumed = f"resumed_from:{run_dir}/checkpoints/ckpt_{step:08d}.h5"
    deadline = time.time() + 120
    while time.time() < deadline and f"step:{step + 5}/" not in read_text(os.path.join(run_dir, "log.txt")):
        time.sleep(0.5)
    log = read_text(os.path.join(run_dir, "log.txt"))
    record = cluster.states(job).get(job)
    print(f"node2's slurmd back: the job is {record.state if record else '?'} after {record.restarts if record else '?'} "
          f"requeue(s); resumed from step {step}: {resumed in log}", flush=True)
    check(resumed in log and f"step:{step + 5}/" in log and record is not None and record.restarts == 1,
          f"the requeued job did not resume on 2 nodes from step {step}:\n{cluster.job_report(job)}")
    check("placement: node1 ranks 0-1 local 0-1, node2 ranks 2-3 local 0-1" in log.split("preempted:")[-1],
          "the resumed run is on both nodes")
    cluster.scancel(job, check=False)
    cluster.wait(job, timeout=120)
    outputs_read_back("after the resumed run", run_dir)


def averaging_ms(log):
    """Median over the steps from 3 on of the time the step line gives to the gradient all-reduce and
    Muon's exchange together."""
    times = []
    for m in re.finditer(r"^step:(\d+)/\d+ train_loss:.* allreduce_ms:([0-9.]+)(?:.* muon_exchange_ms:([0-9.]+))?",
                         log, re.MULTILINE):
        if int(m.group(1)) >= 3:
            times.append(float(m.group(2)) + float(m.group(3) or 0))
    return statistics.median(times) if times else float("nan")


def scenario_slow(cluster):
    figures, step_bytes = {}, 0
    for rate in (None, "1gbit", "100mbit"):
        for node in cluster.node_names:
            cluster.net.shape(node, rate)
        work = submit_folder(f"slow-{rate or 'unshaped'}")
        job = submit(cluster, work, extra=["--set", "train.iterations=20", "--set", "run.checkpoint_every=0"])
        final = cluster.wait(job, timeout=300)[job]
        log = read_text(os.path.join(run_dir_of(work, job), "log.txt"))
        figures[rate] = averaging_ms(log)
        found = re.search(r"allreduce_bytes:(\d+) .* muon_exchange_bytes:(\d+)", log)
        step_bytes = int(found.group(1)) + int(found.group(2)) if found else step_bytes
        print(f"links {rate or 'unshaped'}: {final.state}; median averaging {figures[rate]:.1f} ms a step", flush=True)
        check(final.state == "COMPLETED" and "step:20/20 " in log, f"training at {rate}: {cluster.job_report(job)}")
    for node in cluster.node_names:
        cluster.net.shape(node, None)
    # Each node must take in the other's share of the step's averaged bytes: at 100 Mbit/s that alone
    # takes bytes / 12.5 MB/s, far above what the faster links cost.
    floor_ms = step_bytes / 12.5e6 * 1e3
    print(f"the averaged bytes of a step take {floor_ms:.1f} ms at 100 Mbit/s", flush=True)
    check(figures["100mbit"] >= 0.9 * floor_ms and figures["100mbit"] > figures["1gbit"]
          and figures["100mbit"] > figures[None], f"the averaging time does not follow the links' rate: {figures}")


def scenario_teardown(cluster):
    """A test process killed with SIGKILL (a ctest timeout) while its cluster runs: the guardian removes
    every namespace, and with them the links and the bridge, and stops every daemon; the running
    cluster beside it is untouched."""
    code = f"""
import sys, time
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from multinode_cluster import MultiNodeCluster
cluster = MultiNodeCluster({WORKDIR!r}, nodes=2)
cluster.start()
print(cluster.net.tag, cluster.conf, flush=True)
time.sleep(600)
"""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    tag, conf = child.stdout.readline().split()
    before = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check(before.count(tag) == 4, f"the killed cluster's 4 namespaces (switch, ctl, node1, node2): {before}")
    child.kill()
    child.wait()
    deadline = time.time() + 30
    left, daemons = [], []
    while time.time() < deadline:
        left = [line for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True
                                                ).stdout.splitlines() if tag in line]
        root = os.path.dirname(os.path.dirname(conf))  # the cluster's folder, named by every daemon's command line
        daemons = [p for p in os.listdir("/proc") if p.isdigit() and root in read_text(f"/proc/{p}/cmdline")]
        if not left and not daemons:
            break
        time.sleep(0.5)
    print(f"a test killed with its cluster running: {len(left)} namespaces and {len(daemons)} daemons left after "
          "the guardian", flush=True)
    check(not left and not daemons, f"left behind: namespaces {left}, daemons {daemons}")
    check(cluster.node_states() == {"node1": "idle", "node2": "idle"}, "the other cluster still runs")


def main():
    os.makedirs(WORKDIR, exist_ok=True)
    try:
        cluster = MultiNodeCluster(WORKDIR, nodes=2)
        cluster.start()
    except NamespacesRefused as e:
        print(f"SKIP: {e}")
        sys.exit(77)
    try:
        {"run": scenario_run, "node": scenario_node, "partition": scenario_partition, "slurmd": scenario_slurmd,
         "slow": scenario_slow, "teardown": scenario_teardown}[SCENARIO](cluster)
    finally:
        cluster.stop(failed=bool(failures))
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check(cluster.net.tag not in left, f"namespaces left behind: {left}")
    sys.exit(1 if failures else 0)


main()
