#!/usr/bin/python3
"""The docs checker itself: on a made-up checkout whose README shows kgpt's output rightly, wrongly,
out of order or unmarked, check_docs.py must pass the right blocks and fail every other one.

usage: test_check_docs.py KGPT SOURCE_DIR
"""
import subprocess
import sys
import tempfile
from pathlib import Path

FENCE = "```"


def readme(blocks):
    return "# test\n\n" + "\n".join(blocks) + "\n"


def console(name, *lines):
    marker = f"<!-- check: {name} -->\n" if name else ""
    return marker + FENCE + "console\n" + "\n".join(lines) + "\n" + FENCE + "\n"


def main(kgpt, source_dir):
    checker = Path(source_dir) / "tests" / "docs" / "check_docs.py"
    failures = []
    with tempfile.TemporaryDirectory(prefix="kgpt_docs_test_") as temp:
        root = Path(temp)
        for folder in ("inputs", "postprocess", "slurm", "scripts", "data", "docs"):
            (root / folder).mkdir()
        version = subprocess.run([kgpt, "--version"], text=True, stdout=subprocess.PIPE).stdout.splitlines()
        first = version[0]
        (root / "README.md").write_text(readme([
            console("right", "$ build/kgpt --version", first[:10] + "...", "..."),
            console("wrong", "$ build/kgpt --version", "kgpt 0.0.0 (nothing like it)"),
            console("out-of-order", "$ build/kgpt --version", version[1], first),
            console("error-shown", "$ build/kgpt chekc", "kgpt: error: unknown command 'chekc' (did you mean 'check'?); see kgpt --help"),
            "<!-- file: deck.yaml -->\n" + FENCE + "yaml\nmodel:\n  n_head: sixteen\n" + FENCE + "\n",
            console("file-written", "$ build/kgpt check deck.yaml",
                    "kgpt check: error: deck.yaml:2:11: model.n_head: expected an integer, got 'sixteen'"),
            "<!-- check: script -->\n" + FENCE + "sh\nbuild/kgpt --version\n" + FENCE + "\n\n" + FENCE +
            "text\n" + first + "\n" + FENCE + "\n",
            "<!-- check: script-fails -->\n" + FENCE + "sh\nfalse\nbuild/kgpt --version\n" + FENCE + "\n\n" +
            FENCE + "text\n...\n" + FENCE + "\n",
            console(None, "$ build/kgpt --version", first),
        ]), encoding="utf-8")
        listed = subprocess.run([sys.executable, str(checker), kgpt, str(root), "--list"], text=True,
                                stdout=subprocess.PIPE).stdout.split()
        expected = {"right": 0, "wrong": 1, "out-of-order": 1, "error-shown": 0, "file-written": 0,
                    "script": 0, "script-fails": 1}
        unmarked = [name for name in listed if name.startswith("README.md:line-")]
        if len(unmarked) != 1:
            failures.append(f"the unmarked console block is not listed as a problem: {listed}")
        cases = list(expected.items()) + [(name.split(":", 1)[1], 1) for name in unmarked]
        for name, code in cases:
            result = subprocess.run([sys.executable, str(checker), kgpt, str(root), "--block", f"README.md:{name}"],
                                    text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if result.returncode != code:
                failures.append(f"check {name}: exit code {result.returncode}, expected {code}:\n{result.stdout}")
            else:
                print(f"check {name}: exit code {code} as expected")
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
