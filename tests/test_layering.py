#!/usr/bin/python3
"""The source tree's folders include only folders below them (docs/design.md, "The source tree").

usage: test_layering.py SOURCE_DIR

Reads every #include "folder/..." of src/ and app/ and fails, naming the file, the line and the folder, where
a folder includes one that comes after it in LAYERS (a folder may include itself).
"""
import os
import re
import sys

# The levels, lowest first: a folder includes only itself and the folders of earlier levels.
LAYERS = [["core"], ["config", "parallel", "quant"], ["data", "model"], ["optim", "probes"], ["io"], ["features"], ["inference"], ["train"], ["app"]]
LEVEL = {folder: i for i, level in enumerate(LAYERS) for folder in level}

src = os.path.join(sys.argv[1], "src")
problems = []
seen = set()
sources = [(root, files) for root, _, files in os.walk(src)] + [(r, f) for r, _, f in os.walk(os.path.join(sys.argv[1], "app"))]
for root, files in sources:
    for name in files:
        if not name.endswith((".hpp", ".cpp", ".h")):
            continue
        path = os.path.join(root, name)
        relative = os.path.relpath(path, sys.argv[1]).split(os.sep)
        folder = "app" if relative[0] == "app" else relative[1]
        if folder not in LEVEL:
            continue  # files at src/'s top (CMake inputs) belong to no folder
        seen.add(folder)
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
                if not m or m.group(1) not in LEVEL:
                    continue
                target = m.group(1)
                if target != folder and LEVEL[target] >= LEVEL[folder]:
                    problems.append(f"{os.path.relpath(path, sys.argv[1])}:{number}: {folder}/ includes {target}/, "
                                    f"which is not below it ({line.strip()})")
unknown = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)) and d not in LEVEL)
if unknown:
    problems.append(f"src/ has folders the layering does not place: {', '.join(unknown)} (add them to LAYERS)")
if len(seen) < 10:
    problems.append(f"read includes in only {sorted(seen)}: the tree is not where this test looks")
for p in problems:
    print("FAIL:", p)
print(f"{len(problems)} problem(s) in the includes of {len(seen)} folders")
sys.exit(1 if problems else 0)
