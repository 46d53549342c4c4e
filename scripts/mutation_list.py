#!/usr/bin/python3
"""The list of planted bugs, scripts/mutations.txt, read in one place for scripts/mutate.sh and for
the test that keeps the list in step with the code.

  mutation_list.py fields LIST          one line per bug: NAME, FILE, FIND, REPLACE, TESTS, WHY
                                        separated by the unit separator (0x1f), for mutate.sh
  mutation_list.py check LIST [--ctest-dir BUILD]
                                        exit 1, naming each, when a bug's block lacks a field, names
                                        a file that is not there, finds text its file no longer holds,
                                        replaces it with itself, repeats a name, or (with the build
                                        folder, whose tests `ctest -N` lists) names tests that match
                                        no test

A bug whose text moved is no longer planted by mutate.sh ("stale"), so the list's claim that every
bug is caught would silently cover fewer bugs: the check fails first.
"""

import os
import re
import subprocess
import sys

FIELDS = ("name", "file", "find", "replace", "tests", "why")


def read_blocks(path):
    """The list's blocks (runs of lines between blank lines) that hold fields, each a dict of its
    fields and the line its first field is on."""
    blocks, fields = [], {}
    lines = open(path, encoding="utf-8").read().splitlines() + [""]
    for number, row in enumerate(lines, start=1):
        if not row.strip():
            if fields:
                blocks.append(fields)
            fields = {}
        elif not row.startswith("#") and ": " in row:
            key, _, value = row.partition(": ")
            fields.setdefault("line", number)
            fields[key] = value
    return blocks


def problems(path, test_names=None):
    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    found, seen = [], {}
    for block in read_blocks(path):
        where = f"{path}:{block['line']}: {block.get('name', '(no name)')}"
        missing = [f for f in FIELDS if not block.get(f)]
        if missing:
            found.append(f"{where}: no {', '.join(missing)}")
            continue
        if block["name"] in seen:
            found.append(f"{where}: the name is also used at line {seen[block['name']]}")
        seen[block["name"]] = block["line"]
        source = os.path.join(root, block["file"])
        if not os.path.isfile(source):
            found.append(f"{where}: {block['file']} is not there")
            continue
        if block["find"] not in open(source, encoding="utf-8").read():
            found.append(f"{where}: {block['file']} no longer holds the text to find: {block['find']}")
        if block["find"] == block["replace"]:
            found.append(f"{where}: the replacement is the text itself")
        try:
            pattern = re.compile(block["tests"])
        except re.error as e:
            found.append(f"{where}: tests '{block['tests']}' is not a regular expression ({e})")
            continue
        if test_names is not None and not any(pattern.search(n) for n in test_names):
            found.append(f"{where}: tests '{block['tests']}' matches no ctest test")
    return found


def ctest_names(build_dir):
    listing = subprocess.run(["ctest", "--test-dir", build_dir, "-N"], capture_output=True, text=True, check=True)
    names = re.findall(r"^\s*Test\s+#\d+: (.*)$", listing.stdout, re.MULTILINE)
    if not names:
        sys.exit(f"ctest -N lists no tests in {build_dir}")
    return names


def main(argv):
    if len(argv) >= 3 and argv[1] == "fields":
        for block in read_blocks(argv[2]):
            if "name" in block:
                print("\x1f".join(block.get(f, "") for f in FIELDS))
        return 0
    if (len(argv) == 3 or (len(argv) == 5 and argv[3] == "--ctest-dir")) and argv[1] == "check":
        names = ctest_names(argv[4]) if len(argv) == 5 else None
        found = problems(argv[2], names)
        for p in found:
            print(p)
        count = len([b for b in read_blocks(argv[2]) if "name" in b])
        print(f"{count} planted bugs, {len(found)} problem(s)")
        return 1 if found else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
