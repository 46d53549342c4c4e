#!/usr/bin/python3
"""Every family kgpt registers has an independent PyTorch model and a dump test.

usage: test_coverage.py REFERENCE_DUMP DUMP...   (DUMP: the reference_dump variants ctest runs)

The registry (reference_dump --families) against FAMILIES in reference_models.py and the
variants tests/CMakeLists.txt runs against PyTorch: a family added to kgpt without its reference
fails here, naming what is missing.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_models import FAMILIES  # noqa: E402

dump, covered = sys.argv[1], sys.argv[2:]
registered = subprocess.run([dump, "--families"], check=True, capture_output=True, text=True, timeout=60).stdout.split()
problems = []
if not registered:
    problems.append(f"{dump} --families listed no family")
for family in registered:
    if family not in FAMILIES:
        problems.append(f"family {family} is registered but has no PyTorch model: add it to FAMILIES in "
                        "tests/reference/reference_models.py")
    if family not in covered:
        problems.append(f"family {family} is registered but no reference test dumps it: add it to "
                        "KGPT_REFERENCE_DUMPS in tests/CMakeLists.txt")
for variant in covered:
    if variant.split("-")[0] not in registered:
        problems.append(f"KGPT_REFERENCE_DUMPS names {variant}, whose family is not registered")
print(f"registered: {', '.join(registered)}; PyTorch models: {', '.join(sorted(FAMILIES))}; dumps: {', '.join(covered)}")
for problem in problems:
    print("FAIL:", problem)
print("passed" if not problems else "failed")
sys.exit(1 if problems else 0)
