#!/usr/bin/python3
"""kgpt train's TensorBoard event files, read by readers written elsewhere, against history.h5.

usage: test_tensorboard.py KGPT SOURCE_DIR WORKDIR NPM_MODULES

The tiny deck (inputs/tiny_cpu.yaml) trains 6 steps with an evaluation and a multiple-choice task
(scripts/fortune_task.py) every 3 steps. Its event files are read four ways, none written here:
- Debian's python3-crc32c checks both masked checksums of every record (the framing walked here);
- npm's @roboflow/tfrecords walks the same files with its own framing helpers and checksums and
  must find the same records, byte for byte;
- Debian's protoc decodes every record with --decode_raw, and python3-protobuf parses every record
  with classes protoc generates from tests/io/tensorboard_event.proto (TensorBoard's field numbers);
  both must give the same tags and values;
- where TensorBoard is installed, its EventAccumulator loads the run directory.
Then:
- every history.h5 column written as a train/ scalar, val/loss and val/bpb, and each task's acc and
  acc_norm equal the events' values as float32, at the same steps, each step once;
- the time left (history and step lines) is the median of the last 101 step times times the steps
  left, 0 at the end;
- a copy of the run whose step-6 checkpoint is deleted resumes from step 3: its earlier file is cut
  to steps 1-3 (the evaluations at 3 dropped, as the run scores them again), a new file starts with
  a SessionLog START at step 4, and together they hold every step once with the uninterrupted
  run's losses (resume is bit-exact);
- a running job (SIGTERM ends it) has flushed events for the steps its log shows, and
  `kgpt inspect RUN_DIR` prints its progress and time left;
- run.tensorboard: false writes no event file; a damaged event file ends --resume with exit code 2
  and a message naming the file and the record's byte offset.
"""

import base64
import glob
import importlib
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

import crc32c
import h5py
import numpy as np

KGPT, SOURCE_DIR, WORKDIR, NPM_MODULES = sys.argv[1:5]
ROOT = os.path.join(WORKDIR, "tensorboard")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
ENV.pop("SLURM_NTASKS", None)
ITERATIONS = 6
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)


def masked(data):
    crc = crc32c.crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The records of a TFRecord file, both checksums checked with python3-crc32c."""
    data = open(path, "rb").read()
    out, at = [], 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        (length_crc,) = struct.unpack_from("<I", data, at + 8)
        check(length_crc == masked(data[at:at + 8]), f"{path}: record at byte {at}: length checksum")
        record = data[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack_from("<I", data, at + 12 + length)
        check(data_crc == masked(record), f"{path}: record at byte {at}: data checksum")
        out.append(record)
        at += 16 + length
    return out


def event_classes():
    generated = os.path.join(ROOT, "generated")
    os.makedirs(generated, exist_ok=True)
    proto_dir = os.path.join(SOURCE_DIR, "tests", "io")
    subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--python_out={generated}", "tensorboard_event.proto"],
                   check=True)
    sys.path.insert(0, generated)
    return importlib.import_module("tensorboard_event_pb2")


PB = None  # the generated Event classes (event_classes)


def decode_raw(record):
    """protoc --decode_raw's reading of one Event: (step, [(tag, value)]) from its text."""
    r = subprocess.run(["protoc", "--decode_raw"], input=record, capture_output=True, timeout=30)
    check(r.returncode == 0, f"protoc --decode_raw failed: {r.stderr.decode()}")
    text = r.stdout.decode()
    step = re.search(r"^2: (\d+)$", text, re.M)
    pairs = re.findall(r'^\s+1: "([^"]*)"\n\s+2: (0x[0-9a-f]+)$', text, re.M)
    values = [(tag, struct.unpack("<f", struct.pack("<I", int(bits, 16)))[0]) for tag, bits in pairs]
    return (int(step.group(1)) if step else 0), values


def whole_records(data):
    """The bytes of data up to its last whole record: what a writer still writing has finished."""
    at = 0
    while len(data) - at >= 12:
        (length,) = struct.unpack_from("<Q", data, at)
        if len(data) - at < 16 + length:
            break
        at += 16 + length
    return data[:at]


def snapshot(run_dir):
    """A copy of a running job's event files, each cut to its whole records, in a folder of its own."""
    copy = os.path.join(ROOT, os.path.basename(run_dir) + "_snapshot")
    shutil.rmtree(copy, ignore_errors=True)
    os.makedirs(copy)
    for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        with open(os.path.join(copy, os.path.basename(path)), "wb") as f:
            f.write(whole_records(data))
    return copy


def read_events(run_dir, raw_check=True):
    """Every Event of the run directory's files, in file order: (file, Event) pairs, read by
    python3-protobuf, after the framing agrees with @roboflow/tfrecords' and protoc's decoding
    agrees with protobuf's."""
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    node = subprocess.run(["node", os.path.join(SOURCE_DIR, "tests", "io", "tfrecord_framing.cjs"), NPM_MODULES, *files],
                          capture_output=True, text=True, timeout=120)
    check(node.returncode == 0, f"@roboflow/tfrecords could not walk the files: {node.stderr}")
    npm_records = [base64.b64decode(json.loads(line)["data"]) for line in node.stdout.splitlines()]
    events, ours = [], []
    for path in files:
        for record in records(path):
            ours.append(record)
            event = PB.Event()
            event.ParseFromString(record)
            events.append((path, event))
            if raw_check:
                step, values = decode_raw(record)
                check(step == event.step, f"{path}: protoc reads step {step}, protobuf {event.step}")
                mine = [(v.tag, v.simple_value) for v in event.summary.value]
                check(values == mine, f"{path} step {event.step}: protoc reads {values}, protobuf {mine}")
    check(npm_records == ours, f"{run_dir}: @roboflow/tfrecords finds {len(npm_records)} records, "
                               f"python3-crc32c's walk {len(ours)}, or their bytes differ")
    return files, events


def run(args, expect=0, timeout=600):
    r = subprocess.run([KGPT, *args], cwd=SOURCE_DIR, env=ENV, capture_output=True, text=True, timeout=timeout)
    if r.returncode != expect:
        print(r.stdout[-4000:], r.stderr[-4000:])
        sys.exit(f"kgpt {' '.join(args)}: exit code {r.returncode}, expected {expect}")
    return r


def english_fortunes():
    r = subprocess.run(["bash", os.path.join(SOURCE_DIR, "scripts", "english_fortunes.sh")], capture_output=True,
                       text=True, check=True)
    return r.stdout.split()


def scalars(events, prefix):
    """{(tag, step): value} of the tags under prefix; a tag at a step twice is a failure."""
    out = {}
    for path, event in events:
        for value in event.summary.value:
            if not value.tag.startswith(prefix):
                continue
            key = (value.tag, event.step)
            check(key not in out, f"{path}: {value.tag} at step {event.step} twice")
            out[key] = value.simple_value
    return out


def same_float32(event_value, history_value):
    return np.float32(history_value).tobytes() == np.float32(event_value).tobytes() or (
        math.isnan(event_value) and math.isnan(history_value))


def compare_with_history(run_dir, events):
    with h5py.File(os.path.join(run_dir, "history.h5"), "r", swmr=True) as h:
        task_names = h["task"].attrs["names"]
        task_names = (task_names.decode() if isinstance(task_names, bytes) else str(task_names)).split("\n")
        train = {name: h["train"][name][()] for name in h["train"].keys()}
        val = {name: h["val"][name][()] for name in h["val"].keys()}
        task = {name: h["task"][name][()] for name in h["task"].keys()}
    steps = [int(s) for s in train["step"]]
    check(steps == list(range(1, ITERATIONS + 1)), f"{run_dir}: history's train steps {steps}")
    train_events = scalars(events, "train/")
    tags = sorted({tag for tag, _ in train_events})
    expected_tags = sorted(f"train/{c}" for c in ("loss", "lr_matrix", "lr_scalar", "lr_embedding", "lr_head", "grad_norm",
                                                 "step_ms", "tokens_per_s", "model_flops_per_s", "averaging_ms",
                                                 "memory_bytes", "time_left_s"))
    check(tags == expected_tags, f"{run_dir}: train tags {tags}")
    compared = 0
    for tag in tags:
        column = tag[len("train/"):]
        for row, step in enumerate(steps):
            value = train_events.get((tag, step))
            check(value is not None, f"{run_dir}: no {tag} at step {step}")
            if value is not None:
                compared += 1
                check(same_float32(value, train[column][row]),
                      f"{run_dir}: {tag} at step {step} is {value}, history {train[column][row]}")
    check(len(train_events) == len(tags) * len(steps), f"{run_dir}: {len(train_events)} train scalars")
    val_events = scalars(events, "val/")
    val_steps = [int(s) for s in val["step"]]
    check(val_steps == [0, 3, 6], f"{run_dir}: val steps {val_steps}")
    check(len(val_events) == 2 * len(val_steps), f"{run_dir}: {len(val_events)} val scalars")
    for row, step in enumerate(val_steps):
        for column in ("loss", "bpb"):
            value = val_events.get((f"val/{column}", step))
            check(value is not None and same_float32(value, val[column][row]),
                  f"{run_dir}: val/{column} at step {step} is {value}, history {val[column][row]}")
            compared += 1
    task_events = scalars(events, "task/")
    check(len(task_events) == 2 * len(task["step"]) and len(task["step"]) == 3,
          f"{run_dir}: {len(task_events)} task scalars for {len(task['step'])} history rows")
    for row, step in enumerate(task["step"]):
        name = task_names[int(task["task"][row])]
        for column in ("acc", "acc_norm"):
            value = task_events.get((f"task/{name}/{column}", int(step)))
            check(value is not None and same_float32(value, task[column][row]),
                  f"{run_dir}: task/{name}/{column} at step {step} is {value}, history {task[column][row]}")
            compared += 1
    return train, compared


def check_time_left(run_dir, train):
    """time_left_s = median(last 101 step times) x steps left, in the history and on the step lines."""
    for row, step in enumerate(train["step"]):
        window = train["step_ms"][max(0, row - 100):row + 1]
        # The upper middle of an even window, as kgpt takes it.
        expected = sorted(window)[len(window) // 2] / 1e3 * (ITERATIONS - int(step))
        got = train["time_left_s"][row]
        check(abs(got - expected) <= 1e-9 * max(1.0, expected), f"{run_dir}: time_left_s at step {step} is {got}, "
                                                                f"expected {expected}")
    check(train["time_left_s"][-1] == 0, f"{run_dir}: time left at the last step {train['time_left_s'][-1]}")
    lines = [line for line in open(os.path.join(run_dir, "log.txt")) if "train_loss:" in line]
    check(lines and all(re.search(r" time_left_s:\d+", line) for line in lines),
          f"{run_dir}: step lines without time_left_s: {lines}")


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    os.makedirs(ROOT)
    global PB
    PB = event_classes()
    task_file = os.path.join(ROOT, "fortune_task.jsonl")
    subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "scripts", "fortune_task.py"), *english_fortunes(),
                    "--out", task_file, "--examples", "8", "--val-fraction", "0.05"], check=True, capture_output=True)
    common = ["--set", "train.seq_len=256", "--set", "train.eval_every=3", "--set", "train.val_tokens=4096", "--set", f"data.task_files={task_file}",
              "--set", "train.task_eval_every=3", "--set", "train.log_every=2", "--set", "run.checkpoint_every=3",
              "--set", "run.checkpoint_keep_last=5"]

    # One run of 6 steps, read four ways.
    full = os.path.join(ROOT, "full")
    run(["train", "inputs/tiny_cpu.yaml", "--run-dir", full, "--set", f"train.iterations={ITERATIONS}", *common])
    files, events = read_events(full)
    check(len(files) == 1, f"{full}: event files {files}")
    check(events and events[0][1].file_version == "brain.Event:2", f"{full}: first event {events[:1]}")
    train, compared = compare_with_history(full, events)
    print(f"full run: {len(events)} events in {len(files)} file, {compared} values equal history.h5's")
    check_time_left(full, train)
    inspect = run(["inspect", full]).stdout
    check(f"progress: step {ITERATIONS}/{ITERATIONS} (100.0%), finished" in inspect, f"inspect: {inspect}")
    check("tensorboard: 1 event file" in inspect, f"inspect: {inspect}")

    # TensorBoard's own reader, where it is installed (the GPU machines).
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        print("TensorBoard is not installed here: its EventAccumulator is not run")
    else:
        accumulator = event_accumulator.EventAccumulator(full)
        accumulator.Reload()
        loaded = [(e.step, e.value) for e in accumulator.Scalars("train/loss")]
        check([s for s, _ in loaded] == list(range(1, ITERATIONS + 1)), f"EventAccumulator's steps {loaded}")
        check(all(same_float32(v, train["loss"][i]) for i, (_, v) in enumerate(loaded)), f"EventAccumulator {loaded}")
        print(f"TensorBoard's EventAccumulator reads train/loss at {len(loaded)} steps, equal to history.h5's")

    # Resumed from step 3 after losing the step-6 checkpoint: cut, restarted, every step once.
    resumed = os.path.join(ROOT, "resumed")
    shutil.copytree(full, resumed)
    newest = sorted(glob.glob(os.path.join(resumed, "checkpoints", "*")))
    with h5py.File(newest[-1], "r") as f:
        check(int(f["state"]["step"][()]) == ITERATIONS, f"{newest[-1]} is not step {ITERATIONS}")
    os.remove(newest[-1])
    log = run(["train", "inputs/tiny_cpu.yaml", "--run-dir", resumed, "--resume", "--set",
               f"train.iterations={ITERATIONS}", *common]).stdout
    check("resumed_from:" in log and " step:3" in log, f"resume: {log[:2000]}")
    files, events = read_events(resumed)
    check(len(files) == 2, f"{resumed}: event files {files}")
    first = [e for path, e in events if path == files[0]]
    second = [e for path, e in events if path == files[1]]
    check(max(e.step for e in first) == 3 and not any(
        e.step == 3 and any(not v.tag.startswith("train/") for v in e.summary.value) for e in first),
          f"{files[0]} was not cut to steps 1-3 without the evaluations at 3")
    check(len(second) > 1 and second[1].session_log.status == PB.SessionLog.START and second[1].step == 4,
          f"{files[1]}: its second event is not a SessionLog START at step 4: {second[:2]}")
    train_resumed, compared = compare_with_history(resumed, events)
    check(list(train_resumed["loss"]) == list(train["loss"]),
          f"resumed losses {list(train_resumed['loss'])} differ from {list(train['loss'])}")
    print(f"resumed run: {len(events)} events in 2 files, {compared} values equal history.h5's, losses bit-exact")

    # A running job: its events are on disk at its log's pace, and inspect says where it stands.
    running = os.path.join(ROOT, "running")
    job = subprocess.Popen([KGPT, "train", "inputs/tiny_cpu.yaml", "--run-dir", running, "--set", "train.iterations=400",
                            "--set", "train.log_every=1", "--set", "train.eval_every=0", "--set", "train.val_tokens=4096"],
                           cwd=SOURCE_DIR, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        logged = 0
        while time.time() < deadline and logged < 4:
            time.sleep(0.5)
            if os.path.exists(os.path.join(running, "log.txt")):
                logged = sum(1 for line in open(os.path.join(running, "log.txt")) if "train_loss:" in line)
        check(logged >= 4, f"{running}: the job logged {logged} steps in 300 s")
        # The job writes on: the readers get a copy cut to the records it has finished.
        _, live = read_events(snapshot(running), raw_check=False)
        live_steps = {e.step for _, e in live if e.summary.value}
        check(set(range(1, 5)) <= live_steps, f"{running}: flushed event steps {sorted(live_steps)} lack 1-4")
        inspect = run(["inspect", running]).stdout
        check(re.search(r"progress: step \d+/400 \(\d+\.\d%\), time left (\d+h)?(\d+m)?\d+s", inspect) is not None,
              f"inspect of a running job: {inspect}")
        print("running job:", re.search(r"progress: .*", inspect).group(0))
    finally:
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=120)
    check(job.returncode == 3, f"{running}: SIGTERM ended the job with exit code {job.returncode}, not 3")

    # Off, and damaged.
    off = os.path.join(ROOT, "off")
    run(["train", "inputs/tiny_cpu.yaml", "--run-dir", off, "--set", "train.iterations=2", "--set", "train.eval_every=0",
         "--set", "train.val_tokens=4096", "--set", "run.tensorboard=false"])
    check(not glob.glob(os.path.join(off, "events.out.tfevents.*")), f"{off}: event files with run.tensorboard false")
    damaged = os.path.join(ROOT, "damaged")
    shutil.copytree(full, damaged)
    path = sorted(glob.glob(os.path.join(damaged, "events.out.tfevents.*")))[0]
    data = bytearray(open(path, "rb").read())
    offset = 16 + struct.unpack_from("<Q", data, 0)[0]  # the second record
    data[offset + 20] ^= 0x40
    open(path, "wb").write(bytes(data))
    os.remove(sorted(glob.glob(os.path.join(damaged, "checkpoints", "*")))[-1])
    r = run(["train", "inputs/tiny_cpu.yaml", "--run-dir", damaged, "--resume", "--set", f"train.iterations={ITERATIONS}",
             *common], expect=2)
    message = r.stderr
    check(path in message and f"record at byte {offset}" in message and "checksum" in message,
          f"damaged event file: {message}")

    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("ok")


if __name__ == "__main__":
    main()
