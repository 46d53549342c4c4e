#!/usr/bin/python3
"""Every family kgpt registers has an independent PyTorch model, a dump test and parallel runs.

usage: test_coverage.py REFERENCE_DUMP --dumps VARIANT... --parallel NAME...

The registry (reference_dump --families) against FAMILIES in reference_models.py, the
reference_dump variants tests/CMakeLists.txt runs against PyTorch (KGPT_REFERENCE_DUMPS) and the
families it trains at world sizes 1, 2 and 4 (KGPT_PARALLEL_FAMILIES): a family added to kgpt
without its reference or its parallel runs fails here, naming what is missing.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_models import FAMILIES  # noqa: E402

dump = sys.argv[1]
lists = {"--dumps": [], "--parallel": []}
current = None
for arg in sys.argv[2:]:
    if arg in lists:
        current = lists[arg]
    elif current is None:
        sys.exit(f"usage: {sys.argv[0]} REFERENCE_DUMP --dumps VARIANT... --parallel NAME...")
    else:
        current.append(arg)
registered = subprocess.run([dump, "--families"], check=True, capture_output=True, text=True, timeout=60).stdout.split()
problems = []
if not registered:
    problems.append(f"{dump} --families listed no family")
where = {"--dumps": "KGPT_REFERENCE_DUMPS (reference: FAMILY against PyTorch)",
         "--parallel": "KGPT_PARALLEL_FAMILIES (parallel: FAMILY at world sizes 1, 2 and 4 agrees)"}
for family in registered:
    if family not in FAMILIES:
        problems.append(f"family {family} is registered but has no PyTorch model: add it to FAMILIES in "
                        "tests/reference/reference_models.py")
    for flag, names in lists.items():
        if family not in names:
            problems.append(f"family {family} is registered but not in tests/CMakeLists.txt's {where[flag]}")
for flag, names in lists.items():
    for name in names:
        if name.split("-")[0] not in registered:
            problems.append(f"tests/CMakeLists.txt's {where[flag].split(' ')[0]} names {name}, whose family is not "
                            "registered")
print(f"registered: {', '.join(registered)}; PyTorch models: {', '.join(sorted(FAMILIES))}; "
      f"dumps: {', '.join(lists['--dumps'])}; parallel: {', '.join(lists['--parallel'])}")
for problem in problems:
    print("FAIL:", problem)
print("passed" if not problems else "failed")
sys.exit(1 if problems else 0)
