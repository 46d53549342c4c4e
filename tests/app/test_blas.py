#!/usr/bin/python3
"""The host BLAS's kernel (core/blas.hpp), through the real kgpt and Debian's OpenBLAS.

usage: test_blas.py KGPT MPIEXEC SOURCE_DIR WORKDIR

What this CPU has is read here from /proc/cpuinfo, and what OpenBLAS chooses on its own from its
own report (OPENBLAS_VERBOSE=2 prints "Core: NAME" each time the library loads):
- OPENBLAS_CORETYPE unset: where OpenBLAS's own kernel uses fewer vector units than the CPU has,
  kgpt restarts itself with the kernel for the CPU (the library loads twice, the second time with
  that kernel) and says so in `kgpt --version`, the run log and the bench output, on one rank and on
  two under mpiexec (every rank restarts; the log says every rank runs the same); elsewhere OpenBLAS's
  choice stands and nothing restarts;
- OpenBLAS choosing a generic kernel on its own, shown on any CPU with KGPT_OPENBLAS_AS_DETECTED
  (OPENBLAS_CORETYPE=Prescott then stands for OpenBLAS's choice): kgpt restarts with the kernel for
  the CPU, on one rank and on two;
- a generic kernel forced by hand (OPENBLAS_CORETYPE=Prescott) is kept, named in the log, and the
  log says which kernel would suit the CPU;
- a user's own other setting is kept as well.
"""

import os
import re
import shutil
import subprocess
import sys

KGPT, MPIEXEC, SOURCE_DIR, WORKDIR = sys.argv[1:5]
ROOT = os.path.join(WORKDIR, "blas_runs")
BASE = {k: v for k, v in os.environ.items()
        if k not in ("OPENBLAS_CORETYPE", "KGPT_OPENBLAS_CHOSE", "KGPT_OPENBLAS_AS_DETECTED")}
BASE.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
            OPENBLAS_VERBOSE="2")
# OpenBLAS's x86-64 kernels by the vector units they use (3 AVX-512, 2 AVX2, 1 AVX, 0 SSE).
LEVEL = {"SkylakeX": 3, "Cooperlake": 3, "SapphireRapids": 3, "Haswell": 2, "Zen": 2, "Excavator": 2,
         "Sandybridge": 1, "Bulldozer": 1, "Piledriver": 1, "Steamroller": 1, "Prescott": 0, "Core2": 0,
         "Penryn": 0, "Dunnington": 0, "Nehalem": 0, "Barcelona": 0, "Atom": 0, "Nano": 0, "Bobcat": 0}
BEST = {3: "SkylakeX", 2: "Haswell", 1: "Sandybridge"}
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def cpu_level():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                if {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"} <= flags:
                    return 3
                if {"avx2", "fma"} <= flags:
                    return 2
                return 1 if "avx" in flags else 0
    return -1


def run(args, coretype=None, ranks=0, extra=None):
    env = dict(BASE, **(extra or {}))
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    command = ([MPIEXEC, "--oversubscribe", "-n", str(ranks)] if ranks else []) + [KGPT] + args
    r = subprocess.run(command, cwd=SOURCE_DIR, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(f"{' '.join(command)}: exit code {r.returncode}")
    return r.stdout, re.findall(r"^Core: (\S+)", r.stderr, re.M)


def train(name, coretype=None, ranks=0, extra=None):
    run_dir = os.path.join(ROOT, name)
    run(["train", "inputs/tiny_cpu.yaml", "--run-dir", run_dir, "--set", "train.iterations=2", "--set",
         "train.eval_every=0", "--set", "train.val_tokens=4096"], coretype, ranks, extra)
    with open(os.path.join(run_dir, "log.txt")) as f:
        lines = [l for l in f.read().splitlines() if l.startswith("blas: ")]
    check(len(lines) == 1, f"{name}: one blas line in the log, not {len(lines)}")
    return lines[0] if lines else ""


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    level = cpu_level()
    if level < 0:
        print("not an x86-64 CPU: OpenBLAS's x86 kernels do not apply")
        return
    _, loads = run(["--version"], coretype=None)
    if not loads:
        sys.exit("OPENBLAS_VERBOSE=2 printed no 'Core:' line: is the BLAS OpenBLAS?")
    chosen = loads[0]  # the library's first load: its own choice
    below = chosen in LEVEL and LEVEL[chosen] < level and level in BEST
    best = BEST.get(level, "")
    print(f"CPU level {level} ({best or 'no kernel to ask for'}); OpenBLAS on its own: {chosen}; "
          f"kgpt should {'restart with ' + best if below else 'keep it'}")

    # OPENBLAS_CORETYPE unset: one rank, then two.
    version, loads = run(["--version"])
    blas = next((l for l in version.splitlines() if l.startswith("BLAS: ")), "")
    if below:
        check(loads == [chosen, best], f"--version: the library loaded as {loads}, want {chosen} then {best}")
        wanted = f"kernel {best}, 1 thread: OpenBLAS chose {chosen}"
        check(wanted in blas and f"kgpt set OPENBLAS_CORETYPE={best} and restarted" in blas,
              f"--version's BLAS line says what kgpt did: {blas!r}")
    else:
        check(loads == [chosen], f"--version: the library loaded as {loads}, want {chosen} once")
        check(f"kernel {chosen}, 1 thread: OpenBLAS's choice" in blas, f"--version keeps OpenBLAS's choice: {blas!r}")
    for ranks in (0, 2):
        line = train(f"unset_{ranks}", ranks=ranks)
        final = best if below else chosen
        check(f"kernel {final}," in line, f"{ranks or 1} rank(s): the log names kernel {final}: {line!r}")
        check(("and restarted" in line) == below, f"{ranks or 1} rank(s): the log says whether kgpt restarted: {line!r}")
        if ranks:
            check(line.endswith("; every rank the same"), f"2 ranks: the log says every rank runs the same: {line!r}")
    bench, _ = run(["bench", "inputs/tiny_cpu.yaml", "--steps", "1", "--warmup", "1"])
    check(any(l.startswith("blas: ") and f"kernel {best if below else chosen}," in l for l in bench.splitlines()),
          f"kgpt bench names the BLAS and its kernel: {bench[:400]!r}")

    # OpenBLAS choosing a generic kernel on its own, shown on any x86-64 CPU with AVX or more:
    # KGPT_OPENBLAS_AS_DETECTED makes OPENBLAS_CORETYPE=Prescott stand for OpenBLAS's own choice.
    if level >= 1:
        for ranks in (0, 2):
            env_hook = {"KGPT_OPENBLAS_AS_DETECTED": "1"}
            line = train(f"generic_{ranks}", coretype="Prescott", ranks=ranks, extra=env_hook)
            check(f"kernel {best}, 1 thread: OpenBLAS chose Prescott, a kernel below this CPU's vector units" in line
                  and f"kgpt set OPENBLAS_CORETYPE={best} and restarted" in line,
                  f"{ranks or 1} rank(s), Prescott as OpenBLAS's choice: kgpt restarts with {best}: {line!r}")
            if ranks:
                check(line.endswith("; every rank the same"), f"2 ranks restarted alike: {line!r}")
        _, loads = run(["--version"], coretype="Prescott", extra={"KGPT_OPENBLAS_AS_DETECTED": "1"})
        check(loads == ["Prescott", best], f"the library loaded as Prescott, then as {best}: {loads}")

    # A generic kernel forced by hand: kept, and named as such.
    line = train("prescott", coretype="Prescott")
    check("kernel Prescott, 1 thread: set by hand (OPENBLAS_CORETYPE), kept" in line, f"Prescott by hand is kept: {line!r}")
    if level >= 1:
        check(f"{best}'s kernel would use more of this CPU's vector units" in line,
              f"the log says which kernel would suit this CPU: {line!r}")
    _, loads = run(["--version"], coretype="Prescott")
    check(loads == ["Prescott"], f"Prescott by hand: the library loaded once, as Prescott: {loads}")

    # A user's own other setting: kept (an AVX2 kernel on an AVX-512 CPU, an AVX one on an AVX2 CPU).
    if level >= 2:
        own = BEST[level - 1]
        line = train("own", coretype=own, ranks=2)
        check(f"kernel {own}, 1 thread: set by hand (OPENBLAS_CORETYPE), kept" in line and "restarted" not in line,
              f"{own} by hand is kept on every rank: {line!r}")
        check(line.endswith("; every rank the same"), f"{own} by hand: every rank the same: {line!r}")

    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("blas: all checks passed")


main()
