"""Data-parallel scaling of `kgpt train` on CPU ranks: step time and the share of it spent in
gradient averaging, for 1, 2 and 4 ranks, at a fixed global batch (strong scaling) and at a fixed
batch per rank (weak scaling), at each parallel.zero_stage asked for (stage 1 adds the parameter
all-gather's bytes and time). A benchmark, not a test: it prints figures.

usage: python3 bench/scaling.py [--kgpt build/kgpt] [--deck inputs/tiny_cpu.yaml] [--steps 10]
       [--ranks 1 2 4] [--zero-stages 0 1] [--set section.key=value]...

Every run uses OPENBLAS_NUM_THREADS=1 so that ranks, not BLAS threads, share the cores; runs
with more ranks than cores are oversubscribed (mpiexec --oversubscribe) and say so. Figures are
the median over steps 2..N (the first step includes start-up effects).
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

STEP = re.compile(r"^step:(\d+)/\d+ train_loss:\S+ lr:\S+ step_ms:(\S+) tok/s:(\S+) allreduce_calls:(\d+) "
                  r"allreduce_bytes:(\d+) allreduce_ms:(\S+)(?: allgather_calls:\d+ allgather_bytes:(\d+) allgather_ms:(\S+))?")


def run(args, ranks, global_tokens, accum_total, stage, run_dir):
    command = ["mpiexec", "--oversubscribe", "-n", str(ranks), args.kgpt, "train", args.deck, "--run-dir", run_dir,
               "--set", f"train.iterations={args.steps}", "--set", "train.eval_every=0",
               "--set", "train.val_tokens=4096", "--set", "train.log_every=1", "--set", "train.warmdown_iters=0",
               "--set", f"train.global_batch_tokens={global_tokens}", "--set", f"train.accum_total={accum_total}",
               "--set", f"parallel.zero_stage={stage}"]
    for override in args.set:
        command += ["--set", override]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{result.stderr}")
    rows = [m.groups() for m in map(STEP.match, result.stdout.splitlines()) if m]
    rows = rows[1:] if len(rows) > 1 else rows
    step_ms = statistics.median(float(r[1]) for r in rows)
    tok_s = statistics.median(float(r[2]) for r in rows)
    allreduce_ms = statistics.median(float(r[5]) for r in rows)
    gather_bytes = int(rows[0][6] or 0)
    gather_ms = statistics.median(float(r[7] or 0) for r in rows)
    return step_ms, tok_s, int(rows[0][3]), int(rows[0][4]), allreduce_ms, gather_bytes, gather_ms


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kgpt", default="build/kgpt")
    parser.add_argument("--deck", default="inputs/tiny_cpu.yaml")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--global-tokens", type=int, default=8192, help="global batch of the 1-rank runs")
    parser.add_argument("--accum", type=int, default=8, help="accum_total of the 1-rank runs")
    parser.add_argument("--zero-stages", type=int, nargs="+", default=[0])
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()
    cores = os.cpu_count()
    workdir = tempfile.mkdtemp(prefix="kgpt-scaling-")
    try:
        print(f"deck {args.deck}, {args.steps} steps per run, {cores} cores, OPENBLAS_NUM_THREADS=1")
        print("| scaling | zero stage | ranks | global batch tokens | accum_total | ms/step | tok/s | "
              "gradient calls/step | MB averaged/step | averaging ms/step | MB gathered/step | gather ms/step | "
              "averaging + gather share |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for kind in ("strong", "weak"):
            for ranks in args.ranks:
                for stage in args.zero_stages:
                    scale = 1 if kind == "strong" else ranks
                    tokens, accum = args.global_tokens * scale, args.accum * scale
                    step_ms, tok_s, calls, nbytes, avg_ms, gbytes, g_ms = run(
                        args, ranks, tokens, accum, stage, os.path.join(workdir, f"{kind}_{ranks}_{stage}"))
                    note = " (oversubscribed)" if ranks > cores else ""
                    print(f"| {kind} | {stage} | {ranks}{note} | {tokens} | {accum} | {step_ms:.1f} | {tok_s:.0f} | "
                          f"{calls} | {nbytes / 1e6:.2f} | {avg_ms:.1f} | {gbytes / 1e6:.2f} | {g_ms:.1f} | "
                          f"{100 * (avg_ms + g_ms) / step_ms:.1f}% |", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
