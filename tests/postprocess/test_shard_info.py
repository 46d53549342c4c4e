#!/usr/bin/python3
"""postprocess/shard_info.py against shards made by the real `kgpt prepare`.

usage: test_shard_info.py KGPT_EXE SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

kgpt, source = sys.argv[1], sys.argv[2]
tool = os.path.join(source, "postprocess", "shard_info.py")
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


with tempfile.TemporaryDirectory() as tmp:
    text = "".join(f"document {i}: the quick brown fox\n%\n" for i in range(50))
    with open(os.path.join(tmp, "in.txt"), "w") as f:
        f.write(text)
    subprocess.run([kgpt, "prepare", "--input", os.path.join(tmp, "in.txt"), "--out", os.path.join(tmp, "d"),
                    "--doc-delimiter", "%", "--val-fraction", "0.2", "--prefix", "p", "--quiet"], check=True)

    run = subprocess.run([sys.executable, tool, "--csv", "--vocab-size", "257", os.path.join(tmp, "d", "p_*.bin")],
                         capture_output=True, text=True)
    check(run.returncode == 0, f"exit code {run.returncode}: {run.stderr}")
    rows = [line.split(",") for line in run.stdout.strip().splitlines()[1:]]
    check(len(rows) == 2, f"two shards expected, got {rows}")
    by_name = {os.path.basename(r[0]): r for r in rows}
    # Numbers from an independent read of the same files.
    for name in ("p_train_000000.bin", "p_val_000000.bin"):
        raw = np.fromfile(os.path.join(tmp, "d", name), dtype="<u2", offset=1024)
        row = by_name.get(name)
        check(row is not None, f"{name} missing from output")
        if row:
            check(int(row[1]) == raw.size, f"{name}: tokens {row[1]} != {raw.size}")
            check(int(row[3]) == 256, f"{name}: max id {row[3]} should be the boundary 256")
            check(int(row[5]) == int((raw == 256).sum()), f"{name}: documents {row[5]}")
    check(int(by_name["p_val_000000.bin"][5]) == 10, "0.2 x 50 documents go to val")

    peek = subprocess.run([sys.executable, tool, "--peek", "40", os.path.join(tmp, "d", "p_val_000000.bin")],
                          capture_output=True, text=True)
    check("<doc>document 0: the quick brown fox" in peek.stdout, f"peek shows the text: {peek.stdout}")

    small = subprocess.run([sys.executable, tool, "--vocab-size", "200", os.path.join(tmp, "d", "p_val_000000.bin")],
                           capture_output=True, text=True)
    check(small.returncode == 2 and "is not below the vocabulary size 200" in small.stderr, f"vocab check: {small.stderr}")

    with open(os.path.join(tmp, "bad.bin"), "wb") as f:
        f.write(b"\0" * 2000)
    bad = subprocess.run([sys.executable, tool, os.path.join(tmp, "bad.bin")], capture_output=True, text=True)
    check(bad.returncode == 2 and "bad.bin: magic number is 0" in bad.stderr, f"corrupt shard: {bad.stderr}")

    missing = subprocess.run([sys.executable, tool, os.path.join(tmp, "none_*.bin")], capture_output=True, text=True)
    check(missing.returncode == 2 and "no such file" in missing.stderr, f"missing: {missing.stderr}")

for failure in failures:
    print("FAILED:", failure)
print(f"{'passed' if not failures else 'failed'}: {len(failures)} failures")
sys.exit(1 if failures else 0)
