"""What the stall watchdog costs a step, two ways. Directly: `kgpt bench` reports the CPU time of
the watchdog's thread and of the progress marks per step (watchdog_ms_per_step, watchdog_share).
Side by side: `kgpt bench` with parallel.stall_timeout_s = 0 (off) and with the watchdog on, in
alternating runs so that drifts of the machine fall on both alike; on a shared machine the spread of
this comparison is larger than the cost. A benchmark, not a test: it prints figures.

usage: python3 bench/watchdog_overhead.py [--kgpt build/kgpt] [--deck inputs/tiny_cpu.yaml]
       [--ranks 2] [--rounds 4] [--steps 10] [--timeout 600] [--set section.key=value]...

Each round runs both settings once (in turns: off first in even rounds, on first in odd ones). The
figures are the mean step_ms over the rounds and the overhead of "on" relative to "off". A small
--timeout wakes the watchdog more often (every timeout / 20, at most once a second, at least every
50 ms), the worst case.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

STEP_MS = re.compile(r"\bstep_ms:(\S+)")
WATCHDOG = re.compile(r"^stall_watchdog:(\S+(?: \([^)]*\))?)(?: watchdog_ms_per_step:(\S+) watchdog_share:(\S+)%)?$",
                      re.MULTILINE)


def bench(args, timeout):
    command = ["mpiexec", "--oversubscribe", "-n", str(args.ranks), args.kgpt, "bench", args.deck,
               "--steps", str(args.steps), "--warmup", "2", "--gemm-size", "256",
               "--set", f"parallel.stall_timeout_s={timeout}"]
    for override in args.set:
        command += ["--set", override]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    step = STEP_MS.search(result.stdout)
    watchdog = WATCHDOG.search(result.stdout)
    if result.returncode != 0 or not step or not watchdog:
        sys.exit(f"failed: {' '.join(command)}\n{result.stdout}{result.stderr}")
    share = float(watchdog.group(3)) if watchdog.group(3) else 0.0
    return float(step.group(1)), watchdog.group(1), share


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kgpt", default="build/kgpt")
    parser.add_argument("--deck", default="inputs/tiny_cpu.yaml")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()

    times = {"off": [], "on": []}
    shares = []
    described = {}
    for round_number in range(args.rounds):
        order = ["off", "on"] if round_number % 2 == 0 else ["on", "off"]
        for setting in order:
            step_ms, described[setting], share = bench(args, 0 if setting == "off" else args.timeout)
            times[setting].append(step_ms)
            if setting == "on":
                shares.append(share)
            print(f"round {round_number + 1} {setting:3}: step_ms:{step_ms:.1f} stall_watchdog:{described[setting]}"
                  + (f" watchdog_share:{share:.4f}%" if setting == "on" else ""), flush=True)
    off, on = statistics.mean(times["off"]), statistics.mean(times["on"])
    spread = max(statistics.pstdev(times["off"]), statistics.pstdev(times["on"]))
    print(f"deck:{args.deck} ranks:{args.ranks} steps:{args.steps} rounds:{args.rounds}")
    print(f"direct cost ({described['on']}): {statistics.mean(shares):.4f}% of a step (largest {max(shares):.4f}%)")
    print(f"side by side: step_ms off:{off:.1f} on:{on:.1f} difference:{100 * (on - off) / off:+.2f}% "
          f"(run-to-run spread of one setting: {100 * spread / off:.2f}%)")


if __name__ == "__main__":
    main()
