#!/usr/bin/python3
"""Runs the commands the README and docs/ show and compares what kgpt prints with the lines shown.

A code block is checked when the line before it is a marker:

    <!-- check: NAME -->      the next block is checked under NAME:
                              a ```console block: each "$ COMMAND" line is run, and the lines after
                              it, up to the next "$", are what the command must print;
                              a ```sh block: the block runs as one script (stopping at the first
                              failing command), and the next ```text block holds what it must print.
    <!-- file: PATH -->       the next block is written to PATH before the document's checks run
                              (a deck the checks read, say).

The lines shown must appear in the output in their order (other lines may come between them);
"..." in a line stands for any text, and a line of "..." alone only marks that lines are left out.
Every ```console block must be marked: a console block is output that a reader takes as printed.

Commands run in a fresh folder holding links to the checkout's inputs/, postprocess/, slurm/ and
scripts/, to its data/ folders, and build/ to the folder of the kgpt being tested, so the commands
read exactly as a user types them from the checkout.

usage: check_docs.py KGPT SOURCE_DIR --list | --block FILE:NAME
"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

DOCUMENTS = ["README.md", "docs/*.md"]
MARKER = re.compile(r"^<!-- (check|file): (\S+) -->$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


class Block:
    def __init__(self, document, line, kind, text):
        self.document, self.line, self.kind, self.text = document, line, kind, text
        self.marker = None  # ("check" | "file", name)


def read_blocks(path, source_dir):
    """The fenced blocks of one Markdown file, with the marker on the line before each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    relative = str(path.relative_to(source_dir))
    blocks, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, kind, start = fence.group(1), fence.group(2), i
        body = []
        i += 1
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        block = Block(relative, start + 1, kind, body)
        previous = lines[start - 1].strip() if start > 0 else ""
        marker = MARKER.match(previous)
        if marker:
            block.marker = (marker.group(1), marker.group(2))
        blocks.append(block)
        i += 1
    return blocks


def documents(source_dir):
    paths = []
    for pattern in DOCUMENTS:
        paths += sorted(source_dir.glob(pattern))
    return paths


def checks(source_dir):
    """(document, name) -> (commands, expected) or a problem string; and the files of each document."""
    found, files = {}, {}
    for path in documents(source_dir):
        blocks = read_blocks(path, source_dir)
        for index, block in enumerate(blocks):
            if block.marker and block.marker[0] == "file":
                files.setdefault(block.document, []).append((block.marker[1], block.text))
                continue
            if block.marker is None:
                if block.kind == "console":
                    found[(block.document, f"line-{block.line}")] = (
                        f"{block.document}:{block.line}: a console block without a "
                        "'<!-- check: NAME -->' line before it; mark it so a test runs it")
                continue
            key = (block.document, block.marker[1])
            if key in found:
                found[key] = f"{block.document}:{block.line}: a second check named {key[1]}"
            elif block.kind == "console":
                found[key] = ("console", console_steps(block.text))
            elif block.kind == "sh":
                following = [b for b in blocks[index + 1:] if b.kind]
                if not following or following[0].kind != "text":
                    found[key] = (f"{block.document}:{block.line}: the checked sh block is not "
                                  "followed by a ```text block of its output")
                else:
                    found[key] = ("sh", [("\n".join(block.text), following[0].text)])
            else:
                found[key] = (f"{block.document}:{block.line}: only console and sh blocks can be "
                              f"checked, not '{block.kind or 'plain'}'")
    return found, files


def console_steps(lines):
    """[(command, expected lines)] of a console block; a command may go on over lines ending in \\."""
    steps = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            if steps:
                steps[-1][1].append(lines[i])
            i += 1
            continue
        command = lines[i][2:]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + "\n" + lines[i]
        steps.append((command, []))
        i += 1
    return steps


def pattern(line):
    return re.compile("".join(".*" if part == "..." else re.escape(part)
                              for part in re.split(r"(\.\.\.)", line.rstrip())))


def compare(expected, output):
    """None when the expected lines appear in the output in order, else what went wrong."""
    actual = [line.rstrip() for line in output.splitlines()]
    position = 0
    for line in expected:
        if line.strip() in ("", "..."):
            continue
        wanted = pattern(line)
        while position < len(actual) and not wanted.fullmatch(actual[position]):
            position += 1
        if position == len(actual):
            return f"this line is not in the output (in its order):\n  {line}"
        position += 1
    return None


def make_work_dir(kgpt, source_dir, work, files):
    for folder in ("inputs", "postprocess", "slurm", "scripts"):
        os.symlink(source_dir / folder, work / folder)
    os.symlink(Path(kgpt).resolve().parent, work / "build")
    (work / "data").mkdir()
    if (source_dir / "data").is_dir():
        for entry in (source_dir / "data").iterdir():
            os.symlink(entry, work / "data" / entry.name)
    for name, text in files:
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(text) + "\n", encoding="utf-8")


def run_check(kgpt, source_dir, document, name):
    found, files = checks(source_dir)
    check = found.get((document, name))
    if check is None:
        print(f"no check named {name} in {document}")
        return 1
    if isinstance(check, str):
        print(check)
        return 1
    kind, steps = check
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory(prefix="kgpt_docs_") as temp:
        work = Path(temp)
        make_work_dir(kgpt, source_dir, work, files.get(document, []))
        for command, expected in steps:
            script = ("set -eo pipefail\n" if kind == "sh" else "") + command
            result = subprocess.run(["bash", "-c", script], cwd=work, env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            print(f"$ {command}\n{result.stdout}(exit code {result.returncode})")
            if kind == "sh" and result.returncode != 0:
                print(f"FAILED: {document}, check {name}: the commands stopped with exit code "
                      f"{result.returncode}")
                return 1
            problem = compare(expected, result.stdout)
            if problem:
                print(f"FAILED: {document}, check {name}: {problem}")
                return 1
    print(f"{document}, check {name}: every line shown is printed")
    return 0


def main(argv):
    if len(argv) < 4 or argv[3] not in ("--list", "--block"):
        print(__doc__.strip().splitlines()[-1])
        return 2
    kgpt, source_dir = argv[1], Path(argv[2]).resolve()
    if argv[3] == "--list":
        found, _ = checks(source_dir)
        for document, name in sorted(found):
            print(f"{document}:{name}")
        return 0
    document, _, name = argv[4].rpartition(":")
    return run_check(kgpt, source_dir, document, name)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
