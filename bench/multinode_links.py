#!/usr/bin/python3
"""The gradient averaging's cost over real links of known rate, against the model that predicts
kgpt's multi-GPU step (docs/parallel.md): kgpt trains on a Slurm cluster of 2 nodes x 2 ranks on
this machine (tests/slurm/multinode_cluster.py: each node a network namespace, Open MPI over TCP
on its link), the links shaped with tc's token bucket, at each rate x overlap on and off x bucket
size, and the averaging time the step lines report is set beside the model's.

    sudo /usr/bin/python3 bench/multinode_links.py [--deck inputs/tiny_cpu.yaml] [--steps 8]
        [--rates 1gbit 100mbit] [--buckets 25 0.25]

The model (bench/scaling.py's ring_ms): an all-reduce of S bytes over N ranks moves 2 (N-1)/N S
bytes through each direction of the slowest link, at its rate. The exposed bytes: without overlap
every gradient; with overlap the tied embedding (final only after the embedding's backward) and
the last bucket, the rest having gone out during the backward; and Muon's orthogonalised updates
(parallel.share_muon), exchanged after the backward. Measured: the median over the steps from 3 on
of the step line's allreduce_ms + muon_exchange_ms (host time in the transport, waiting included),
and the bytes each link carried per step (the nodes' eth0 counters) over the bytes averaged.
Needs root (network namespaces); prints a Markdown table.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "slurm"))
from multinode_cluster import MultiNodeCluster  # noqa: E402
from netbench import _rate_bits  # noqa: E402

NODES = 2
TIMER = os.path.join(ROOT, "build", "bench", "allreduce_time")


def ring_ms(nbytes, ranks, bytes_per_s):
    return 2 * (ranks - 1) / ranks * nbytes / bytes_per_s * 1e3


def step_figures(log):
    rows = []
    for m in re.finditer(r"^step:(\d+)/\d+ train_loss:\S+ .*?step_ms:([0-9.]+) .*?allreduce_bytes:(\d+) "
                         r"allreduce_ms:([0-9.]+)(?:.* muon_exchange_bytes:(\d+) muon_exchange_ms:([0-9.]+))?",
                         log, re.MULTILINE):
        rows.append({"step": int(m.group(1)), "step_ms": float(m.group(2)), "grad_bytes": int(m.group(3)),
                     "allreduce_ms": float(m.group(4)), "muon_bytes": int(m.group(5) or 0),
                     "muon_ms": float(m.group(6) or 0)})
    return rows


def tied_embedding_bytes(log):
    m = re.search(r"vocab:(\d+)", log)
    d = re.search(r"d_model:(\d+)", log)
    return int(m.group(1)) * int(d.group(1)) * 4 if m and d else 0


def gradient_count(args):
    """The deck's parameter count, from kgpt check's memory plan."""
    argv = [args.kgpt, "check", args.deck, "--no-data"]
    for s in args.set:
        argv += ["--set", s]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT).stderr
    return int(re.search(r"parameters\s+[0-9.]+ [KMG]iB\s+([0-9,]+) fp32 values", out).group(1).replace(",", ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kgpt", default=os.path.join(ROOT, "build", "kgpt"))
    parser.add_argument("--deck", default=os.path.join(ROOT, "inputs", "tiny_cpu.yaml"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rates", nargs="+", default=["1gbit", "100mbit"])
    parser.add_argument("--buckets", type=float, nargs="+", default=[25.0, 0.25], help="parallel.bucket_mb")
    parser.add_argument("--per-node", type=int, default=1, help="ranks per node")
    parser.add_argument("--set", action="append", default=[], help="more deck overrides")
    args = parser.parse_args()
    PER_NODE = args.per_node
    ranks = NODES * PER_NODE
    env = {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "eth0", "OMPI_MCA_mpi_yield_when_idle": "1",
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    work = tempfile.mkdtemp(prefix="kgpt-links-")
    results = []
    with MultiNodeCluster(work, nodes=NODES) as cluster:
        goodput, busbw = {}, {}
        gradient_bytes = gradient_count(args) * 4
        for rate in [None, *args.rates]:
            for node in cluster.node_names:
                cluster.net.shape(node, rate)
            goodput[rate] = cluster.net.throughput("node1", "node2", 5 if rate == "100mbit" else 20)
            # The collective's own bus bandwidth on these links, at the size of the gradients.
            probe = cluster.run(["srun", "--mpi=pmix", f"--nodes={NODES}", f"--ntasks-per-node={PER_NODE}", TIMER,
                                 str(gradient_bytes), "7"], timeout=600, cwd=ROOT, env=env)
            busbw[rate] = float(re.search(r"busbw_mb_s:([0-9.]+)", probe.stdout).group(1)) * 1e6
            for overlap in (True, False):
                for bucket in (args.buckets if overlap else args.buckets[:1]):
                    run_dir = os.path.join(work, f"run-{rate}-{overlap}-{bucket}")
                    before = {n: cluster.net.counters(n) for n in cluster.node_names}
                    argv = ["srun", "--mpi=pmix", f"--nodes={NODES}", f"--ntasks-per-node={PER_NODE}", args.kgpt,
                            "train", args.deck, "--run-dir", run_dir, "--set", f"train.iterations={args.steps}",
                            "--set", "train.eval_every=0", "--set", "train.log_every=1",
                            "--set", f"parallel.overlap={'true' if overlap else 'false'}",
                            "--set", f"parallel.bucket_mb={bucket}"]
                    for s in args.set:
                        argv += ["--set", s]
                    r = cluster.run(argv, check=False, timeout=1800, cwd=ROOT, env=env)
                    after = {n: cluster.net.counters(n) for n in cluster.node_names}
                    log = open(os.path.join(run_dir, "log.txt")).read() if os.path.exists(run_dir) else ""
                    rows = [row for row in step_figures(log) if row["step"] >= 3]
                    if r.returncode != 0 or not rows:
                        sys.exit(f"the run at {rate}, overlap {overlap}, bucket {bucket} failed:\n{r.stderr[-3000:]}")
                    grad, muon = rows[-1]["grad_bytes"], rows[-1]["muon_bytes"]
                    steps = len(step_figures(log))
                    link = max(max(after[n][k] - before[n][k] for k in ("rx_bytes", "tx_bytes"))
                               for n in cluster.node_names) / steps
                    exposed = grad if not overlap else min(grad, tied_embedding_bytes(log) + bucket * 1e6)
                    bytes_per_s = _rate_bits(rate) / 8 if rate else goodput[None]
                    results.append({
                        "rate": rate, "overlap": overlap, "bucket": bucket, "grad": grad, "muon": muon,
                        "exposed": exposed, "link_factor": link / (grad + muon),
                        "step_ms": statistics.median(row["step_ms"] for row in rows),
                        "measured": statistics.median(row["allreduce_ms"] + row["muon_ms"] for row in rows),
                        "predicted": ring_ms(exposed + muon, ranks, bytes_per_s),
                        "goodput": goodput[rate], "busbw": busbw[rate],
                        "busbw_documented_ms": ring_ms(exposed + muon, ranks, busbw[rate]),
                        "busbw_all_ms": ring_ms(grad + muon, ranks, busbw[rate])})
                    print(results[-1], flush=True)
        for node in cluster.node_names:
            cluster.net.shape(node, None)
    print(f"\n{os.path.basename(args.deck)}, {NODES} nodes x {PER_NODE} rank(s), Open MPI over TCP, links shaped "
          "with tbf; averaging = allreduce_ms + muon_exchange_ms, median of steps 3 on\n")
    print("| link: one TCP stream, MPI_Allreduce's busbw | overlap | bucket_mb | gradients + Muon MB | "
          "link bytes / averaged | step ms | averaging ms, measured | model: link rate, buckets overlap | "
          "model: busbw, buckets overlap | model: busbw, no overlap |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in results:
        def ratio(model):
            return f"{model:.1f} ({model / x['measured']:.2f})"
        print(f"| {x['rate'] or 'unshaped'}: {x['goodput'] * 8 / 1e6:.0f} Mbit/s, {x['busbw'] * 8 / 1e6:.0f} Mbit/s | "
              f"{'on' if x['overlap'] else 'off'} | {x['bucket'] if x['overlap'] else '-'} | "
              f"{x['grad'] / 1e6:.2f} + {x['muon'] / 1e6:.2f} | {x['link_factor']:.2f} | {x['step_ms']:.0f} | "
              f"{x['measured']:.1f} | {ratio(x['predicted'])} | {ratio(x['busbw_documented_ms'])} | "
              f"{ratio(x['busbw_all_ms'])} |")


if __name__ == "__main__":
    main()
