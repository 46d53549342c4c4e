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
    <!-- table: NAME -->      the Markdown table on the next lines is the one TABLES[NAME] makes
                              from kgpt's output, cell for cell (--update writes it in).

The lines shown must appear in the output in their order (other lines may come between them);
"..." in a line stands for any text, and a line of "..." alone only marks that lines are left out.
Every ```console block must be marked: a console block is output that a reader takes as printed.

Commands run in a fresh folder holding links to the checkout's inputs/, postprocess/, slurm/ and
scripts/, to its data/ folders, and build/ to the folder of the kgpt being tested, so the commands
read exactly as a user types them from the checkout.

usage: check_docs.py KGPT SOURCE_DIR --list | --block FILE:NAME | --update
"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

DOCUMENTS = ["README.md", "docs/*.md"]
MARKER = re.compile(r"^<!-- (check|file|table): (\S+) -->$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


# Tables of figures that kgpt computes without training: the 1.3B deck's memory plan, per rank on
# 8 GPUs (kgpt check --plan-for cuda), in GiB.
PLAN_DECK = ["inputs/llm_1p3b_8xh100.yaml", "--world-size", "8", "--no-data", "--plan-for", "cuda"]
PLAN_ROW = re.compile(r"^  (\S.*?)\s+([0-9.]+) MiB  ")
PLAN_BUDGET = re.compile(r"^  budget: .*; (fits, ([0-9.]+)% used|does NOT fit)")


def memory_plan(kgpt, work, *settings):
    command = [kgpt, "check", *PLAN_DECK]
    for setting in settings:
        command += ["--set", setting]
    output = subprocess.run(command, cwd=work, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT).stdout
    parts, share = {}, None
    for line in output.splitlines():
        row = PLAN_ROW.match(line)
        if row:
            parts[row.group(1)] = float(row.group(2)) / 1024
        budget = PLAN_BUDGET.match(line)
        if budget:
            share = f"{float(budget.group(2)):.0f}%" if budget.group(2) else "refused"
    if "total" not in parts or share is None:
        raise RuntimeError(f"no memory plan from {' '.join(command)}:\n{output}")
    return parts, share


def gib(value):
    return f"{value:.2f}"


def plan_by_batch(kgpt, work):
    rows = ["| micro-batch per rank (accum_total) | parameters | gradients | Adam | bf16 shadow | "
            "activations | workspaces | total | of 79 GiB |", "|---|---|---|---|---|---|---|---|---|"]
    for accum, batch in ((256, 1), (128, 2), (64, 4), (32, 8), (16, 16), (8, 32)):
        parts, share = memory_plan(kgpt, work, f"train.accum_total={accum}")
        label = f"{batch} x 2048 ({accum}{', the deck' if accum == 64 else ''})"
        cells = [parts[k] for k in ("parameters", "gradients", "optimizer state", "bf16 weight shadow",
                                    "activations", "library workspaces", "total")]
        rows.append("| " + " | ".join([label] + [gib(c) for c in cells] + [share]) + " |")
    return rows


def plan_with_recompute(kgpt, work):
    rows = ["| micro-batch per rank (accum_total) | activations, none | activations, block | "
            "total, block | of 79 GiB |", "|---|---|---|---|---|"]
    for accum, batch in ((64, 4), (32, 8), (16, 16), (8, 32)):
        none, _ = memory_plan(kgpt, work, f"train.accum_total={accum}")
        block, share = memory_plan(kgpt, work, f"train.accum_total={accum}", "train.recompute=block")
        label = f"{batch} x 2048 ({accum}{', the deck' if accum == 64 else ''})"
        rows.append(f"| {label} | {gib(none['activations'])} | {gib(block['activations'])} | "
                    f"{gib(block['total'])} | {share} |")
    return rows


def plan_by_zero_stage(kgpt, work):
    rows = ["| | Adam state | total, recompute none | total, recompute block |", "|---|---|---|---|"]
    for stage in (0, 1):
        none, _ = memory_plan(kgpt, work, f"parallel.zero_stage={stage}")
        block, _ = memory_plan(kgpt, work, f"parallel.zero_stage={stage}", "train.recompute=block")
        rows.append(f"| stage {stage} | {gib(none['optimizer state'])} GiB | {gib(none['total'])} GiB | "
                    f"{gib(block['total'])} GiB |")
    return rows


def plan_by_recompute_every(kgpt, work):
    rows = ["| train.recompute_every | 1 (every block) | 2 | 3 | 4 | 6 | 12 | none |", "|---|---|---|---|---|---|---|---|"]
    cells = []
    for every in (1, 2, 3, 4, 6, 12):
        parts, _ = memory_plan(kgpt, work, "train.accum_total=8", "train.recompute=block",
                               f"train.recompute_every={every}", "parallel.device_memory_gib=200")
        cells.append(gib(parts["activations"]))
    parts, _ = memory_plan(kgpt, work, "train.accum_total=8", "parallel.device_memory_gib=200")
    cells.append(gib(parts["activations"]))
    rows.append("| activations, GiB | " + " | ".join(cells) + " |")
    return rows


TABLES = {"plan-1p3b-batch": plan_by_batch, "plan-1p3b-recompute": plan_with_recompute,
          "plan-1p3b-zero-stage": plan_by_zero_stage, "plan-1p3b-recompute-every": plan_by_recompute_every}


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


def read_tables(path):
    """[(name, first line index, lines)] of the tables marked <!-- table: NAME --> in one file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tables = []
    for i, line in enumerate(lines):
        marker = MARKER.match(line.strip())
        if marker and marker.group(1) == "table":
            end = i + 1
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            tables.append((marker.group(2), i + 1, lines[i + 1:end]))
    return tables


def documents(source_dir):
    paths = []
    for pattern in DOCUMENTS:
        paths += sorted(source_dir.glob(pattern))
    return paths


def checks(source_dir):
    """(document, name) -> (commands, expected) or a problem string; and the files of each document."""
    found, files = {}, {}
    for path in documents(source_dir):
        relative = str(path.relative_to(source_dir))
        for name, _, table in read_tables(path):
            found[(relative, name)] = (("table", [(name, table)]) if name in TABLES else
                                       f"{relative}: no table generator named {name} in check_docs.py")
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
        if kind == "table":
            name, shown = steps[0]
            made = TABLES[name](str(Path(kgpt).resolve()), work)
            print("\n".join(made))
            if made != shown:
                print(f"FAILED: {document}, table {name} differs from what kgpt prints (above); "
                      "tests/docs/check_docs.py KGPT SOURCE_DIR --update writes it in")
                return 1
            print(f"{document}, table {name}: every cell is what kgpt prints")
            return 0
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


def update_tables(kgpt, source_dir):
    """Writes every marked table as kgpt makes it now."""
    with tempfile.TemporaryDirectory(prefix="kgpt_docs_") as temp:
        work = Path(temp)
        make_work_dir(kgpt, source_dir, work, [])
        for path in documents(source_dir):
            lines = path.read_text(encoding="utf-8").splitlines()
            for name, start, table in reversed(read_tables(path)):
                if name in TABLES:
                    lines[start:start + len(table)] = TABLES[name](str(Path(kgpt).resolve()), work)
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


def main(argv):
    if len(argv) >= 4 and argv[3] == "--update":
        return update_tables(argv[1], Path(argv[2]).resolve())
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
