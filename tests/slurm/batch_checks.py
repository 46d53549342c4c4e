"""What the tests of batch jobs share: checks that go on after a failure, a job's files read whatever
state they are in, and a submit folder holding the parallel tests' shards."""

import os
import tempfile

failures = []  # every failed check's message; a test ends non-zero when there is one


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return condition


def read_text(path):
    """The file's text, or "" when it is not there (yet)."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def workdir_with_data(parent, data_dir, prefix="work-"):
    """A fresh submit folder whose parallel_data/ is the prepared shards (the deck's relative paths)."""
    work = tempfile.mkdtemp(prefix=prefix, dir=parent)
    os.symlink(os.path.abspath(os.path.join(data_dir, "parallel_data")), os.path.join(work, "parallel_data"))
    return work
