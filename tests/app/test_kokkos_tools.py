#!/usr/bin/python3
"""kgpt train under a Kokkos Tools library loaded through KOKKOS_TOOLS_LIBS, on 1 and 2 ranks.

usage: test_kokkos_tools.py KGPT MPIEXEC SOURCE_DIR WORKDIR TOOL_LIBRARY

The tool library (tests/app/kokkos_tool.cpp, written to the tools' callback interface) records every
kernel, the regions pushed and popped and whether MPI was still running when Kokkos finalized it,
one report per rank. The tiny deck (inputs/tiny_cpu.yaml) trains 2 steps with an evaluation, and:
- every rank writes a report: the library was loaded and finalized on each;
- every kernel kgpt launches is named under "kgpt::": a name from no known prefix (an unnamed
  kernel's functor type, say) fails, and kgpt's own layers, loss and optimizers are among them;
- the phase regions are balanced (none open at the end, no pop without a push) and counted as the
  step makes them: forward and backward once per micro-step, the averaging, optimizer and step start
  once per step; GEMMs and attention are regions under kgpt:: too;
- MPI was still running when the library was finalized (Kokkos ends before MPI);
- the losses equal those of the run without the tool: watching changes nothing;
- `kgpt bench --profile` refuses, naming KOKKOS_TOOLS_LIBS, since the tool holds the callbacks.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import h5py

KGPT, MPIEXEC, SOURCE_DIR, WORKDIR, TOOL = sys.argv[1:6]
ROOT = os.path.join(WORKDIR, "kokkos_tools")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
for name in ("SLURM_NTASKS", "KOKKOS_TOOLS_LIBS", "KOKKOS_PROFILE_LIBRARY"):
    ENV.pop(name, None)
STEPS, ACCUM = 2, 8  # the tiny deck's 8 micro-steps on 1 rank, 4 on 2
# Kernels named by Kokkos and its kernels library themselves (views' initialisation, deep copies).
LIBRARY_PREFIXES = ("Kokkos::", "KokkosBlas", "KokkosKernels", "KokkosBatched")
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def train(name, ranks, tool):
    run_dir = os.path.join(ROOT, name)
    env = dict(ENV)
    if tool:
        env.update(KOKKOS_TOOLS_LIBS=TOOL, KGPT_TOOL_REPORT=os.path.join(ROOT, name + ".report"))
    args = ([MPIEXEC, "--oversubscribe", "-n", str(ranks)] if ranks > 1 else []) + [
        KGPT, "train", "inputs/tiny_cpu.yaml", "--run-dir", run_dir, "--set", f"train.iterations={STEPS}",
        "--set", "train.eval_every=2", "--set", "train.val_tokens=4096"]
    r = subprocess.run(args, cwd=SOURCE_DIR, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        sys.exit(f"{name}: kgpt train failed with exit code {r.returncode}")
    with h5py.File(os.path.join(run_dir, "history.h5"), "r") as h:
        return list(h["train"]["loss"][()])


def read_report(path):
    kernels, regions, finalize = {}, {}, {}
    for line in open(path):
        words = line.rstrip("\n").split(" ")
        if words[0] == "kernel":
            kernels[" ".join(words[3:])] = kernels.get(" ".join(words[3:]), 0) + int(words[2])
        elif words[0] == "region":
            regions[" ".join(words[2:])] = int(words[1])
        elif words[0] == "finalize":
            finalize = dict(word.split("=") for word in words[1:])
    return kernels, regions, finalize


def check_report(name, ranks, rank):
    path = os.path.join(ROOT, f"{name}.report.{rank}")
    if not os.path.exists(path):
        check(False, f"{name}: rank {rank} wrote no report: the library was not loaded or not finalized")
        return
    kernels, regions, finalize = read_report(path)
    foreign = sorted(k for k in kernels if not k.startswith("kgpt::") and not k.startswith(LIBRARY_PREFIXES))
    check(not foreign, f"{name} rank {rank}: kernels not named under kgpt:: {foreign[:10]}")
    ours = [k for k in kernels if k.startswith("kgpt::")]
    for family in ("kgpt::rmsnorm", "kgpt::cross_entropy", "kgpt::muon", "kgpt::adam"):
        check(any(k.startswith(family) for k in ours), f"{name} rank {rank}: no kernel under {family} in {sorted(ours)[:40]}")
    micro_steps = STEPS * ACCUM // ranks
    expected = {"kgpt::forward": micro_steps, "kgpt::backward": micro_steps, "kgpt::averaging": STEPS,
                "kgpt::optimizer": STEPS, "kgpt::step start": STEPS}
    for region, count in expected.items():
        check(regions.get(region) == count, f"{name} rank {rank}: {region} pushed {regions.get(region)} times, not {count}")
    check(any(r.startswith("kgpt::gemm") for r in regions), f"{name} rank {rank}: no GEMM region in {sorted(regions)}")
    check(any(r.startswith("kgpt::attention") for r in regions), f"{name} rank {rank}: no attention region")
    for key, value in (("mpi_running", "1"), ("open_kernels", "0"), ("unknown_ends", "0"), ("region_depth", "0"),
                       ("unmatched_pops", "0")):
        check(finalize.get(key) == value, f"{name} rank {rank}: finalize {key}={finalize.get(key)}, expected {value}")
    print(f"{name} rank {rank}: {len(ours)} kgpt:: kernels ({sum(kernels[k] for k in ours)} launches), "
          f"{len(regions)} regions, depth at most {finalize.get('max_region_depth')}, MPI running at finalize")


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    os.makedirs(ROOT)
    for ranks in (1, 2):
        plain = train(f"plain{ranks}", ranks, tool=False)
        watched = train(f"watched{ranks}", ranks, tool=True)
        check(plain == watched, f"{ranks} rank(s): losses with the tool {watched} differ from {plain}")
        reports = sorted(glob.glob(os.path.join(ROOT, f"watched{ranks}.report.*")))
        check(len(reports) == ranks, f"{ranks} rank(s): reports {reports}")
        for rank in range(ranks):
            check_report(f"watched{ranks}", ranks, rank)
    check(not glob.glob(os.path.join(ROOT, "plain*.report*")), "a run without KOKKOS_TOOLS_LIBS wrote a report")

    env = dict(ENV, KOKKOS_TOOLS_LIBS=TOOL, KGPT_TOOL_REPORT=os.path.join(ROOT, "bench.report"))
    r = subprocess.run([KGPT, "bench", "inputs/tiny_cpu.yaml", "--profile", "--steps", "1"], cwd=SOURCE_DIR, env=env,
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 2 and "KOKKOS_TOOLS_LIBS" in r.stderr,
          f"bench --profile under a tool: exit code {r.returncode}, {r.stderr[-500:]}")

    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("ok")


if __name__ == "__main__":
    main()
