"""Data-parallel scaling of `kgpt train` on CPU ranks: step time and the share of it spent in
gradient averaging, for 1, 2 and 4 ranks, at a fixed global batch (strong scaling) and at a fixed
batch per rank (weak scaling), at each parallel.zero_stage asked for (stage 1 adds the parameter
all-gather's bytes and time). A benchmark, not a test: it prints figures.

usage: python3 bench/scaling.py [--kgpt build/kgpt] [--deck inputs/tiny_cpu.yaml] [--steps 10]
       [--ranks 1 2 4] [--zero-stages 0 1] [--set section.key=value]...
       python3 bench/scaling.py --gpu-model golf|1p3b --rank-ms NAME=MS... [--busbw 350 480]

--gpu-model runs nothing: it models a step on one 8-GPU node from one GPU's measured figures. The
per-rank time is measured on one GPU (`run_cuda_checks.sh`'s world8 step: one micro-step and one
rank's share of Muon for golf; the deck's own 8 micro-steps for the 1.3B deck, whose AdamW every rank
runs whole); to it the model adds what the backward cannot hide of the gradient all-reduce (the
tied embedding, final only at the end, and the last bucket) and the exchange of Muon's updates,
each as a ring all-reduce over NVLink, t = 2 (N-1)/N S / busbw, at the bus bandwidths given.

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


# What an 8-GPU step moves besides the measured compute, in bytes: the fp32 gradient buffer, the part
# of it the backward cannot hide (the tied embedding, final only after the whole backward, and at most
# one 25 MB bucket), and Muon's bf16 updates (2 bytes per matrix element; none under AdamW).
GPU_MODELS = {
    "golf": dict(grads=17_059_912 * 4, exposed=1024 * 512 * 4 + 25e6, exchange=9 * (2 * 512 * 512 + 2 * 256 * 512 + 2 * 1024 * 512) * 2,
                 tokens_per_rank=65_536, upstream_ms=(41.4, 44.8)),
    "1p3b": dict(grads=1_315_723_264 * 4, exposed=(50_257 + 2_048) * 2_048 * 4 + 25e6, exchange=0,
                 tokens_per_rank=65_536, upstream_ms=None),
}


def ring_ms(nbytes, ranks, busbw_gbs):
    return 2 * (ranks - 1) / ranks * nbytes / (busbw_gbs * 1e9) * 1e3


def gpu_model(args):
    model = GPU_MODELS[args.gpu_model]
    ranks = 8
    print(f"{args.gpu_model} on one node of {ranks} GPUs: gradients {model['grads'] / 1e6:.1f} MB, of which exposed "
          f"{model['exposed'] / 1e6:.1f} MB; Muon's exchange {model['exchange'] / 1e6:.1f} MB; bus bandwidth "
          f"{' to '.join(str(b) for b in args.busbw)} GB/s")
    print("| program | per-rank compute, measured (ms) | exposed all-reduce (ms) | Muon exchange (ms) | step (ms) | "
          "tokens/s per GPU |" + (" speed against upstream's 41.4-44.8 ms |" if model["upstream_ms"] else ""))
    print("|---|---|---|---|---|---|" + ("---|" if model["upstream_ms"] else ""))
    for entry in args.rank_ms:
        name, ms = entry.split("=")
        compute = float(ms)
        reduce = [ring_ms(model["exposed"], ranks, b) for b in args.busbw]
        exchange = [ring_ms(model["exchange"], ranks, b) for b in args.busbw]
        steps = [compute + r + e for r, e in zip(reduce, exchange)]
        span = lambda values, digits=2: " - ".join(f"{v:.{digits}f}" for v in sorted(set(round(v, digits) for v in values)))
        row = (f"| {name} | {compute:.2f} | {span(reduce)} | {span(exchange)} | {span(steps)} | "
               f"{span([model['tokens_per_rank'] / (t / 1e3) for t in steps], 0)} |")
        if model["upstream_ms"]:
            low, high = model["upstream_ms"]
            row += f" {low / max(steps):.2f} - {high / min(steps):.2f} of its speed |"
        print(row)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu-model", choices=sorted(GPU_MODELS), help="model an 8-GPU step instead of running")
    parser.add_argument("--rank-ms", action="append", default=[], help="NAME=MS: one rank's measured compute")
    parser.add_argument("--busbw", type=float, nargs="+", default=[350.0, 480.0], help="NCCL bus bandwidth, GB/s")
    parser.add_argument("--kgpt", default="build/kgpt")
    parser.add_argument("--deck", default="inputs/tiny_cpu.yaml")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--global-tokens", type=int, default=8192, help="global batch of the 1-rank runs")
    parser.add_argument("--accum", type=int, default=8, help="accum_total of the 1-rank runs")
    parser.add_argument("--zero-stages", type=int, nargs="+", default=[0])
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()
    if args.gpu_model:
        gpu_model(args)
        return
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
