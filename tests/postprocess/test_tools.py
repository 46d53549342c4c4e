#!/usr/bin/python3
"""postprocess/plot_history.py, compare_runs.py, summarize.py and inspect_checkpoint.py on history and
checkpoint files laid out as kgpt writes them, built here with h5py.

usage: test_tools.py [RUN_DIR...]

Two runs whose decks differ in optim.matrix_lr (and run.name), a third that differs only in
run.name, and a checkpoint. One history is written in SWMR mode and kept open by a writer while the
tools read it. Each RUN_DIR given (a real run directory with history.h5) is also plotted,
summarized and compared, and its newest checkpoint inspected.
"""
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import numpy as np  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(SOURCE, "postprocess")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


def tool(name, *args, cwd=None):
    return subprocess.run([PYTHON, os.path.join(TOOLS, name), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


def check_png(path, what):
    if not os.path.isfile(path):
        check(False, f"{what}: {path} not written")
        return
    with open(path, "rb") as f:
        if f.read(8) != PNG_SIGNATURE:
            check(False, f"{what}: {path} is not a PNG")
            return
    try:
        pixels = matplotlib.image.imread(path)
    except Exception as error:  # a truncated or corrupt PNG is a failure of the tool, not of this script
        check(False, f"{what}: {path} does not load: {error}")
        return
    check(pixels.size > 0 and float(pixels.std()) > 0, f"{what}: {path} is blank")


def deck_text(name, matrix_lr):
    return f"""# kgpt resolved deck: every key with the value in force and where it came from.
# deck: inputs/tiny_cpu.yaml
run:
  name: {name}                                    # --set run.name={name}
  out_dir: runs                                   # default
  seed: 1337                                      # default
model:
  family: golf                                    # inputs/tiny_cpu.yaml:7:11
  n_layer: 2                                      # inputs/tiny_cpu.yaml:9:12
train:
  seq_len: 64                                     # inputs/tiny_cpu.yaml:21:12
optim:
  matrix_lr: {matrix_lr}                                 # --set optim.matrix_lr={matrix_lr}
  adam_eps: 1e-08                                 # default
parallel:
  overlap: true                                   # default
"""


METADATA = {"kgpt_version": "0.1.0", "git_sha": "0123456789ab", "kokkos_version": "3.4.1 (Serial)",
            "mpi_version": "Open MPI v4.1.4", "hdf5_version": "1.10.8", "nccl_version": "none (CPU build)",
            "slurm_job_id": "", "slurm_array_job_id": "", "slurm_array_task_id": "",
            "deck_path": "inputs/tiny_cpu.yaml"}

TRAIN_COLUMNS = [("step", "step", "optimizer step, counted from 1"),
                 ("tokens", "tokens", "training tokens seen up to and including this step"),
                 ("loss", "nats/token", "train loss"), ("lr_matrix", "1", "learning rate of matrices"),
                 ("lr_scalar", "1", "learning rate of scalars"), ("lr_embedding", "1", "learning rate of the embedding"),
                 ("lr_head", "1", "learning rate of the head"), ("grad_norm", "1", "gradient norm"),
                 ("step_ms", "ms", "wall time of the step"), ("tokens_per_s", "tokens/s", "throughput"),
                 ("allreduce_calls", "calls", "all-reduce calls"), ("allreduce_bytes", "bytes", "all-reduce bytes"),
                 ("wall_time_s", "s", "seconds since the run started")]
VAL_COLUMNS = [("step", "step", "optimizer steps done"), ("loss", "nats/token", "val loss"),
               ("bpb", "bits/byte", "val bits per byte")]


def fill_metadata(f, run_dir, deck, fixed_length_deck):
    meta = f.create_group("metadata")
    for key, value in METADATA.items():
        meta.attrs[key] = value
    meta.attrs["run_dir"] = run_dir
    meta.attrs["world_size"] = np.int64(2)
    # kgpt writes a variable-length string; a fixed-length one must read the same.
    meta["deck"] = np.bytes_(deck.encode()) if fixed_length_deck else deck


def history_data(seed, rows=30):
    rng = np.random.default_rng(seed)
    step = np.arange(1, rows + 1, dtype=np.int64)
    lr = np.minimum(step / 3, 1.0) * 0.04
    train = {"step": step, "tokens": step * 1024, "loss": 5.5 * np.exp(-step / 12) + 2 + rng.normal(0, 0.05, rows),
             "lr_matrix": lr, "lr_scalar": lr, "lr_embedding": lr * 1.25, "lr_head": lr * 0.2,
             "grad_norm": rng.uniform(0.5, 2, rows), "step_ms": rng.uniform(7, 9, rows),
             "tokens_per_s": rng.uniform(1.1e5, 1.3e5, rows), "allreduce_calls": np.full(rows, 3, dtype=np.int64),
             "allreduce_bytes": np.full(rows, 149920, dtype=np.int64),
             "wall_time_s": np.cumsum(rng.uniform(0.007, 0.009, rows))}
    # The best val loss is not the last: the tools must find the minimum, not the final row.
    val = {"step": np.array([0, 15, 30], dtype=np.int64), "loss": np.array([5.52, 2.71, 2.75]) + rng.normal(0, 1e-3, 3),
           "bpb": np.array([7.96, 3.93, 3.97]) + rng.normal(0, 1e-3, 3)}
    return train, val


def write_history(run_dir, deck, seed, swmr=False, fixed_length_deck=False):
    """Writes <run_dir>/history.h5; with swmr=True returns the writer, still open in SWMR mode."""
    os.makedirs(run_dir, exist_ok=True)
    train, val = history_data(seed)
    f = h5py.File(os.path.join(run_dir, "history.h5"), "w", libver="latest" if swmr else "earliest")
    for group_name, columns, data in (("train", TRAIN_COLUMNS, train), ("val", VAL_COLUMNS, val)):
        group = f.create_group(group_name)
        for name, units, description in columns:
            dataset = group.create_dataset(name, data=data[name], maxshape=(None,), chunks=(64,))
            dataset.attrs["units"] = units
            dataset.attrs["description"] = description
    fill_metadata(f, run_dir, deck, fixed_length_deck)
    if swmr:
        f.swmr_mode = True
        f.flush()
        return f
    f.close()
    return None


def read_back(run_dir):
    with h5py.File(os.path.join(run_dir, "history.h5"), "r", swmr=True) as f:
        return {g: {n: f[g][n][()] for n in f[g]} for g in ("train", "val")}


def write_checkpoint(path, deck):
    rng = np.random.default_rng(7)
    params = {"blocks.0.attn.c_q.weight": rng.normal(0, 0.02, (8, 4)).astype(np.float32),
              "tok_emb.weight": rng.normal(0, 0.5, (16, 4)).astype(np.float32)}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs["tensor_count"] = np.int64(len(params))
        for name, value in params.items():
            f.create_dataset(f"params/{name}", data=value)
        for group in ("adam_m", "adam_v"):
            for name, value in params.items():
                f.create_dataset(f"optim/{group}/{name}", data=np.zeros_like(value))
        f.create_dataset("optim/muon_momentum/blocks.0.attn.c_q.weight", data=np.zeros((8, 4), np.float32))
        state = f.create_group("state")
        state["step"] = np.int64(30)
        state["tokens_seen"] = np.int64(30720)
        state["stream_position"] = np.int64(30960)
        state["training_seconds"] = np.float64(0.2477)
        state.attrs["note"] = "an attribute the tool does not know"
        fill_metadata(f, os.path.dirname(os.path.dirname(path)), deck, False)
    return params


def check_summary_csv(path, run_dirs, what):
    if not os.path.isfile(path):
        check(False, f"{what}: {path} not written")
        return
    with open(path) as f:
        rows = {row["run"]: row for row in csv.DictReader(f)}
    for run_dir in run_dirs:
        name = os.path.basename(os.path.abspath(run_dir))
        row = rows.get(name)
        check(row is not None, f"{what}: {name} missing from the CSV: {list(rows)}")
        if row is None:
            continue
        h = read_back(run_dir)
        train, val = h["train"], h["val"]
        expected = {"steps": int(train["step"][-1]), "tokens": int(train["tokens"][-1]),
                    "final_train_loss": float(train["loss"][-1]),
                    "median_tokens_per_s": float(np.median(train["tokens_per_s"]))}
        if len(val["loss"]):
            best = int(np.nanargmin(val["loss"]))
            expected.update({"final_val_loss": float(val["loss"][-1]), "best_val_loss": float(np.nanmin(val["loss"])),
                             "best_val_step": int(val["step"][best]), "final_val_bpb": float(val["bpb"][-1]),
                             "best_val_bpb": float(np.nanmin(val["bpb"]))})
        for key, value in expected.items():
            got = row.get(key, "")
            parsed = (int(got) if isinstance(value, int) else float(got)) if got else None
            # Exact: the CSV must carry every digit of the stored doubles.
            check(parsed == value, f"{what}: {name} {key} is {got!r}, history.h5 has {value!r}")


def check_real_runs(run_dirs, tmp):
    """The tools on real kgpt run directories."""
    for run_dir in run_dirs:
        if not os.path.isfile(os.path.join(run_dir, "history.h5")):
            check(False, f"real run: {run_dir}/history.h5 does not exist")
            return
    for i, run_dir in enumerate(run_dirs):
        out = os.path.join(tmp, f"real_{i}.png")
        run = tool("plot_history.py", run_dir, "--out", out)
        check(run.returncode == 0, f"real run: plot_history.py {run_dir}: {run.stderr}")
        check_png(out, f"real run: plot_history.py {run_dir}")
        found = sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) if os.path.isdir(
            os.path.join(run_dir, "checkpoints")) else []
        if found:
            inspect = tool("inspect_checkpoint.py", "--json", run_dir)
            check(inspect.returncode == 0, f"real run: inspect_checkpoint.py {run_dir}: {inspect.stderr}")
            if inspect.returncode == 0:
                report = json.loads(inspect.stdout)
                check(report["total_params"] == sum(t["elements"] for t in report["params"]) > 0,
                      f"real run: {run_dir} total parameter count")
    csv_path = os.path.join(tmp, "real.csv")
    run = tool("summarize.py", "--csv", csv_path, *run_dirs)
    check(run.returncode == 0, f"real run: summarize.py: {run.stderr}")
    if run.returncode == 0:
        check_summary_csv(csv_path, run_dirs, "real run: summarize.py")
    out = os.path.join(tmp, "real_compare.png")
    run = tool("compare_runs.py", "--out", out, *run_dirs)
    check(run.returncode == 0, f"real run: compare_runs.py: {run.stderr}")
    check(run.stdout.count("label: ") == len(run_dirs), f"real run: one label per run: {run.stdout}")
    if len(run_dirs) == 2:
        # The checkpoint test's preempted run resumed bit for bit: no difference from the reference.
        check(f"difference: {run_dirs[1]}: largest relative difference from {run_dirs[0]} over " in run.stdout
              and run.stdout.rstrip().splitlines()[-2].endswith("common steps: 0.00e+00"),
              f"real runs: compare_runs.py's difference line: {run.stdout}")
    check_png(out, "real run: compare_runs.py")


with tempfile.TemporaryDirectory() as tmp:
    run_a, run_b, run_c = (os.path.join(tmp, "runs", n) for n in ("lr_a", "lr_b", "lr_a_again"))
    writer = write_history(run_a, deck_text("alpha", 0.02), seed=1, swmr=True)
    write_history(run_b, deck_text("beta", 0.04), seed=2, fixed_length_deck=True)
    write_history(run_c, deck_text("gamma", 0.02), seed=3)
    ckpt = os.path.join(run_a, "checkpoints", "ckpt_00000030.h5")
    params = write_checkpoint(ckpt, deck_text("alpha", 0.02))

    # plot_history: the default output, the tokens axis and an explicit --out, run_a still open for writing.
    run = tool("plot_history.py", run_a)
    default_png = os.path.join(run_a, "history.png")
    check(run.returncode == 0, f"plot_history.py: exit {run.returncode}: {run.stderr}")
    check(default_png in run.stdout, f"plot_history.py prints the path written: {run.stdout!r}")
    check_png(default_png, "plot_history.py")
    out = os.path.join(tmp, "b_tokens.png")
    run = tool("plot_history.py", os.path.join(run_b, "history.h5"), "--x", "tokens", "--out", out)
    check(run.returncode == 0 and out in run.stdout, f"plot_history.py --x tokens: {run.stderr}")
    check_png(out, "plot_history.py --x tokens")

    # compare_runs: labels name the key that differs, never run.name.
    out = os.path.join(tmp, "compare.png")
    run = tool("compare_runs.py", run_a, run_b, "--out", out)
    check(run.returncode == 0, f"compare_runs.py: {run.stderr}")
    labels = dict(line[len("label: "):].rsplit(": ", 1) for line in run.stdout.splitlines() if line.startswith("label: "))
    check(labels.get(run_a) == "optim.matrix_lr=0.02", f"compare_runs.py label of run a: {labels}")
    check(labels.get(run_b) == "optim.matrix_lr=0.04", f"compare_runs.py label of run b: {labels}")
    check(not any("run.name" in label for label in labels.values()), f"run.name is not a label: {labels}")
    with h5py.File(os.path.join(run_a, "history.h5"), "r", swmr=True) as fa, \
            h5py.File(os.path.join(run_b, "history.h5"), "r") as fb:
        a, b = fa["val/loss"][()], fb["val/loss"][()]
        expected = float(np.max(np.abs(b - a) / np.abs(a)))
    found = re.search(rf"difference: {re.escape(run_b)}: largest relative difference from {re.escape(run_a)} over "
                      rf"(\d+) common steps: (\S+)", run.stdout)
    check(found is not None and int(found.group(1)) == len(a) and float(found.group(2)) == float(f"{expected:.2e}"),
          f"compare_runs.py's difference line: {run.stdout}, want {expected:.2e} over {len(a)} steps")
    check_png(out, "compare_runs.py")
    for metric in ("train_loss", "val_bpb"):
        out = os.path.join(tmp, f"compare_{metric}.png")
        run = tool("compare_runs.py", "--metric", metric, "--x", "tokens", "--out", out, run_a, run_b, run_c)
        check(run.returncode == 0, f"compare_runs.py --metric {metric}: {run.stderr}")
        check_png(out, f"compare_runs.py --metric {metric}")
    # Only run.name differs: the labels fall back to the run directory names.
    run = tool("compare_runs.py", run_a, run_c, cwd=tmp)
    check(f"label: {run_a}: lr_a\n" in run.stdout and f"label: {run_c}: lr_a_again\n" in run.stdout,
          f"compare_runs.py falls back to directory names: {run.stdout}")
    check_png(os.path.join(tmp, "compare_val_loss.png"), "compare_runs.py default output")

    # summarize: the CSV holds exactly the stored values; Markdown on stdout and in a file.
    csv_path, md_path = os.path.join(tmp, "summary.csv"), os.path.join(tmp, "summary.md")
    run = tool("summarize.py", run_a, run_b, run_c, "--csv", csv_path, "--markdown", md_path)
    check(run.returncode == 0, f"summarize.py: {run.stderr}")
    check(run.stdout.startswith("| run | family | steps |"), f"summarize.py prints Markdown: {run.stdout[:200]!r}")
    check("| lr_b | golf | 30 | 30720 |" in run.stdout, f"summarize.py Markdown row: {run.stdout}")
    check(os.path.isfile(md_path) and open(md_path).read() in run.stdout, "summarize.py --markdown file")
    check_summary_csv(csv_path, [run_a, run_b, run_c], "summarize.py")
    best_step = {r["run"]: r["best_val_step"] for r in csv.DictReader(open(csv_path))} if os.path.isfile(csv_path) else {}
    check(best_step.get("lr_a") == "15", f"best val step is 15, not the last: {best_step}")
    writer.close()

    # A sweep folder (as `kgpt sweep` writes it): every point with a history becomes a row named
    # <sweep>/<index> with the point's index and swept values; points not run yet are named and left out.
    sweep_dir = os.path.join(tmp, "sweeps", "lr")
    for index, lr in ((0, 0.02), (1, 0.04)):
        write_history(os.path.join(sweep_dir, "runs", f"{index:03d}"), deck_text(f"{index:03d}", lr), seed=10 + index)
    points = [{"index": i, "deck": f"decks/{i:03d}.yaml", "run_dir": f"runs/{i:03d}",
               "overrides": {"optim.matrix_lr": lr}} for i, lr in ((0, 0.02), (1, 0.04), (2, 0.08))]
    with open(os.path.join(sweep_dir, "manifest.json"), "w") as f:
        json.dump({"sweep": "lr", "keys": ["optim.matrix_lr"], "points": points}, f)
    csv_path = os.path.join(tmp, "sweep.csv")
    run = tool("summarize.py", sweep_dir, "--csv", csv_path)
    check(run.returncode == 0, f"summarize.py on a sweep: {run.stderr}")
    check(run.stdout.startswith("| run | index | optim.matrix_lr | family |"), f"sweep columns: {run.stdout[:200]!r}")
    check("| lr/001 | 1 | 0.04 | golf | 30 |" in run.stdout, f"sweep row: {run.stdout}")
    check(run.stdout.count("| lr/") == 2, f"two sweep rows: {run.stdout}")
    check("point 2 has no history.h5 yet" in run.stderr, f"summarize.py names the point not run: {run.stderr}")
    rows = list(csv.DictReader(open(csv_path))) if os.path.isfile(csv_path) else []
    check([r["optim.matrix_lr"] for r in rows] == ["0.02", "0.04"], f"sweep CSV: {rows}")
    run = tool("compare_runs.py", sweep_dir, "--out", os.path.join(tmp, "sweep.png"))
    check(run.returncode == 0 and "optim.matrix_lr=0.02" in run.stdout and "optim.matrix_lr=0.04" in run.stdout,
          f"compare_runs.py on a sweep: {run.stdout} {run.stderr}")
    check_png(os.path.join(tmp, "sweep.png"), "compare_runs.py on a sweep")
    with open(os.path.join(sweep_dir, "manifest.json"), "w") as f:
        f.write('{"sweep": "lr"}')
    run = tool("summarize.py", sweep_dir)
    check(run.returncode == 2 and "manifest.json: not a kgpt sweep manifest" in run.stderr,
          f"summarize.py on a broken manifest: {run.returncode} {run.stderr}")

    # inspect_checkpoint: shapes, float64 norms and counts against numpy; a directory means its newest checkpoint.
    for target in (ckpt, run_a):
        run = tool("inspect_checkpoint.py", "--json", target)
        check(run.returncode == 0, f"inspect_checkpoint.py --json {target}: {run.stderr}")
        report = json.loads(run.stdout) if run.returncode == 0 else {"params": [], "optim": {}, "state": {}}
        tensors = {t["name"]: t for t in report["params"]}
        check(sorted(tensors) == sorted(params), f"inspect_checkpoint.py tensors: {sorted(tensors)}")
        for name, value in params.items():
            t = tensors.get(name, {})
            norm = float(np.linalg.norm(value.astype(np.float64).ravel()))
            check(t.get("shape") == list(value.shape), f"{name} shape {t.get('shape')} != {value.shape}")
            check(t.get("dtype") == "float32", f"{name} dtype {t.get('dtype')}")
            check(abs(t.get("l2_norm", -1) - norm) <= 1e-12 * norm, f"{name} norm {t.get('l2_norm')} != {norm}")
        check(report.get("total_params") == 32 + 64, f"total parameters {report.get('total_params')} != 96")
        check(report["optim"].get("adam_m", {}).get("tensors") == 2, f"adam_m tensors: {report['optim']}")
        check(report["optim"].get("muon_momentum", {}).get("bytes") == 32 * 4, f"muon bytes: {report['optim']}")
        check(report["state"].get("step") == 30 and report["state"].get("training_seconds") == 0.2477
              and report["state"].get("note") == "an attribute the tool does not know", f"state: {report['state']}")
        check(report.get("metadata", {}).get("world_size") == 2, "metadata world size")
        check(report.get("family") == "golf" and "matrix_lr: 0.02" in report.get("deck", ""), "deck and family")
    run = tool("inspect_checkpoint.py", ckpt)
    check(run.returncode == 0 and "total parameters: 96 (96) in 2 tensors" in run.stdout,
          f"inspect_checkpoint.py text total: {run.stdout[-300:]} {run.stderr}")
    check("tok_emb.weight" in run.stdout and "(16, 4)" in run.stdout and "Open MPI v4.1.4" in run.stdout,
          f"inspect_checkpoint.py text: {run.stdout}")

    # --help, a missing file and a file that is not HDF5: non-zero exit and the file named.
    not_hdf5 = os.path.join(tmp, "not_hdf5", "history.h5")
    os.makedirs(os.path.dirname(not_hdf5))
    with open(not_hdf5, "w") as f:
        f.write("not an HDF5 file\n")
    missing = os.path.join(tmp, "no_such_run")
    for name in ("plot_history.py", "compare_runs.py", "summarize.py", "inspect_checkpoint.py"):
        run = tool(name, "--help")
        check(run.returncode == 0 and run.stdout.startswith("usage:"), f"{name} --help: {run.stdout[:100]!r}")
        args = [os.path.join(missing, "ckpt_00000001.h5")] if name == "inspect_checkpoint.py" else [missing]
        run = tool(name, *args)
        check(run.returncode != 0 and missing in run.stderr, f"{name} on a missing file: {run.returncode} {run.stderr}")
        run = tool(name, not_hdf5)
        check(run.returncode != 0 and not_hdf5 in run.stderr, f"{name} on a non-HDF5 file: {run.returncode} {run.stderr}")
    run = tool("summarize.py", run_a, missing)
    check(run.returncode != 0 and missing in run.stderr, f"summarize.py with one run missing: {run.stderr}")

    if len(sys.argv) > 1:
        check_real_runs(sys.argv[1:], tmp)

for failure in failures:
    print("FAILED:", failure)
print(f"{'passed' if not failures else 'failed'}: {len(failures)} failures")
sys.exit(1 if failures else 0)
