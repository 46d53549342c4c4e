#!/usr/bin/python3
"""Multiple-choice tasks (kgpt eval --task) against an independent PyTorch scoring of the same
checkpoint, with the real kgpt, for the byte, SentencePiece and tiktoken (GPT-2's BPE) tokenizers.

usage: test_task_eval.py KGPT MPIEXEC SOURCE_DIR WORKDIR NPM_PREFIX

Each tokenizer: a small golf model (with BigramHash, SmearGate and depth recurrence, so that the
reference runs them too) trains 30 steps on the same repetitive text; a task file in HellaSwag's
format asks, for a context drawn from the same Markov chain of words as the text, for its drawn
continuation among three others: two walks from other words, one of other words (some with
accented letters, so that characters are not bytes). The reference builds every example from the definition: the
document start and the context's tokens, then each ending's " " + text tokenized on its own (the
byte values, Debian's python3-sentencepiece on the same model, or npm's tiktoken with its gpt2
encoding), scored by reference_models.py's
Golf in float64 with the checkpoint's weights read by h5py; acc takes the ending with the largest
summed log-likelihood, acc_norm the largest per character. Checks:
- kgpt's acc and acc_norm equal the reference's, and the two differ from each other on this file;
- 1 and 3 ranks print the same figures;
- the model picks the true continuation more often than chance;
- bad task files end with exit code 2 naming the file and line (not JSON, a missing field, a label
  out of range, an empty ending, a context longer than train.seq_len), and nothing is printed as a
  result; kgpt train refuses one before it makes its run directory;
- training with data.task_files and train.task_eval_every scores the task at those steps and at the
  end, in the log and in history.h5's /task, the last scores equal to kgpt eval --task's; kgpt
  inspect names them, and postprocess/plot_history.py draws them in a panel of their own.
"""

import os
import re
import shutil
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_models import FAMILIES  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from golf_runs import check, failures, golf_settings, runner  # noqa: E402

KGPT, MPIEXEC, SOURCE_DIR, WORKDIR, NPM_PREFIX = sys.argv[1:6]
ROOT = os.path.join(WORKDIR, "task_eval")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
ENV.pop("SLURM_NTASKS", None)
SEQ = 64
torch.set_default_dtype(torch.float64)
run = runner(ROOT, ENV)

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "runs", "away", "home"]
ODD = ["café", "naïve", "zebra", "über", "piano", "quartz", "mango", "fjord", "déjà", "vu", "kiwi", "yak"]
# A Markov chain over the words: each word is followed by any other, mostly by a few.
TRANSITIONS = np.random.default_rng(7).dirichlet(np.full(len(WORDS), 0.3), size=len(WORDS))


def walk(rng, first, length):
    """`length` words of the chain after word `first` (not included)."""
    out, word = [], first
    for _ in range(length):
        word = int(rng.choice(len(WORDS), p=TRANSITIONS[word]))
        out.append(word)
    return out


def words(indices):
    return " ".join(WORDS[i] for i in indices)


def training_text():
    """Lines of the chain, 30 to a document (between % lines)."""
    rng = np.random.default_rng(3)
    lines = []
    for _ in range(3000):
        first = int(rng.integers(len(WORDS)))
        lines.append(words([first] + walk(rng, first, int(rng.integers(5, 13)))))
    return "".join(line + "\n" + ("%\n" if i % 30 == 29 else "") for i, line in enumerate(lines))


def task_examples(count):
    """The context's true continuation by the chain, two walks from other words, and one of odd
    words: the model errs on some, and acc and acc_norm differ."""
    rng = np.random.default_rng(11)
    examples = []
    for _ in range(count):
        first = int(rng.integers(len(WORDS)))
        context = [first] + walk(rng, first, int(rng.integers(1, 5)))
        endings = [words(walk(rng, context[-1], int(rng.integers(1, 5))))]
        for _ in range(2):
            endings.append(words(walk(rng, int(rng.integers(len(WORDS))), int(rng.integers(1, 5)))))
        endings.append(" ".join(rng.choice(ODD, size=int(rng.integers(1, 3)))))
        label = int(rng.integers(4))
        endings[0], endings[label] = endings[label], endings[0]
        examples.append({"ctx": words(context), "endings": endings, "label": label, "activity_label": "words"})
    return examples


def write_jsonl(path, rows):
    import json
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")


def kgpt_task(checkpoint, task_file, ranks=1):
    args = [KGPT, "eval", checkpoint, "--task", task_file]
    if ranks > 1:
        args = [MPIEXEC, "--oversubscribe", "-n", str(ranks)] + args
    out = run(args).stdout
    found = re.search(r"examples:(\d+) acc:([0-9.]+) acc_norm:([0-9.]+)", out)
    if not found:
        sys.exit(f"kgpt eval --task printed no figures: {out}")
    return int(found.group(1)), float(found.group(2)), float(found.group(3))


def reference_scores(model, examples, encode, start_token):
    right, right_norm = 0, 0
    for e in examples:
        context = [start_token] + encode(e["ctx"])
        scores, per_char = [], []
        for ending in e["endings"]:
            text = " " + ending
            tokens = encode(text)
            x = torch.tensor(context + tokens, dtype=torch.long)
            with torch.no_grad():
                logits = model.logits(x[:-1][None])[0]
                losses = F.cross_entropy(logits, x[1:], reduction="none")
            loglik = -float(losses[len(context) - 1:].sum())
            scores.append(loglik)
            per_char.append(loglik / len(text))
        right += int(np.argmax(scores)) == e["label"]
        right_norm += int(np.argmax(per_char)) == e["label"]
    return right / len(examples), right_norm / len(examples)


def train(name, prepare_args, deck_sets):
    folder = os.path.join(ROOT, name)
    os.makedirs(folder)
    text = os.path.join(folder, "words.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write(training_text())
    run([KGPT, "prepare", "--input", text, "--out", os.path.join(folder, "shards"), "--prefix", "words",
         "--val-fraction", "0.05", "--doc-delimiter", "%"] + prepare_args)
    run_dir = os.path.join(folder, "run")
    sets = [f"data.train_files={folder}/shards/words_train_*.bin", f"data.val_files={folder}/shards/words_val_*.bin",
            f"train.seq_len={SEQ}", "train.global_batch_tokens=512", "train.accum_total=1", "train.iterations=30",
            "train.eval_every=0", "train.warmdown_iters=0", "train.val_tokens=512", "model.n_layer=2",
            "model.d_model=32", "model.n_head=2", "model.n_kv_head=1", "model.bigram_buckets=64",
            "model.bigram_dim=16", "model.smear_gate=true", "model.recur_start=0", "model.recur_count=1",
            "optim.matrix_lr=0.02"] + deck_sets
    args = [KGPT, "train", os.path.join(SOURCE_DIR, "inputs", "tiny_cpu.yaml"), "--run-dir", run_dir]
    for s in sets:
        args += ["--set", s]
    run(args)
    return os.path.join(run_dir, "checkpoints", sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1])


def reference_model(checkpoint):
    with h5py.File(checkpoint, "r") as f:
        deck = f["metadata/deck"][()]
        deck = yaml.safe_load(deck.decode() if isinstance(deck, bytes) else deck)
        weights = {name: torch.tensor(np.array(f["params"][name]), dtype=torch.float64) for name in f["params"]}
    return FAMILIES["golf"](weights, golf_settings(deck["model"]))


def task_file(name):
    """The task file of a tokenizer's run, written before the run (which may score it)."""
    task = os.path.join(ROOT, f"{name}_words_task.jsonl")
    write_jsonl(task, task_examples(40))
    return task


def check_tokenizer(name, checkpoint, encode, start_token):
    task = os.path.join(ROOT, f"{name}_words_task.jsonl")
    examples = task_examples(40)
    count, acc, acc_norm = kgpt_task(checkpoint, task)
    ref_acc, ref_norm = reference_scores(reference_model(checkpoint), examples, encode, start_token)
    print(f"{name}: kgpt acc {acc:.4f} acc_norm {acc_norm:.4f}; reference acc {ref_acc:.4f} acc_norm {ref_norm:.4f}")
    check(count == len(examples), f"{name}: {count} examples scored, want {len(examples)}")
    check(abs(acc - ref_acc) < 1e-9, f"{name}: acc {acc} against the reference's {ref_acc}")
    check(abs(acc_norm - ref_norm) < 1e-9, f"{name}: acc_norm {acc_norm} against the reference's {ref_norm}")
    check(acc != acc_norm, f"{name}: acc and acc_norm agree ({acc}); the file should tell them apart")
    check(acc > 0.4, f"{name}: acc {acc} is not above chance (0.25) by a margin: the scores mean nothing")
    three = kgpt_task(checkpoint, task, ranks=3)
    check(three == (count, acc, acc_norm), f"{name}: 3 ranks give {three}, 1 rank {(count, acc, acc_norm)}")
    return task


def check_bad_files(checkpoint):
    good = '{"ctx": "the quick", "endings": ["brown fox", "zebra"], "label": 0}'
    cases = {
        "not_json": ([good, "{\"ctx\": \"the\", "], ":2: not JSON"),
        "no_label": ([good, good, '{"ctx": "the", "endings": ["a", "b"]}'], ":3: no \"label\""),
        "label_out_of_range": (['{"ctx": "the", "endings": ["a", "b"], "label": 2}'], ":1: \"label\" 2 is out of range"),
        "empty_ending": (['{"ctx": "the", "endings": ["a", ""], "label": 0}'], ":1: ending 1 is empty"),
        "context_too_long": ([good, '{"ctx": "' + "the quick brown fox " * 5 + '", "endings": ["a", "b"], "label": 1}'],
                             ":2: the context"),
    }
    for case, (lines, message) in cases.items():
        path = os.path.join(ROOT, f"{case}.jsonl")
        write_jsonl(path, lines)
        r = run([KGPT, "eval", checkpoint, "--task", path], expect=2)
        check(f"{path}{message}" in r.stderr, f"{case}: want '{path}{message}' in the message, got: {r.stderr.strip()}")
        check("acc:" not in r.stdout, f"{case}: a result was printed: {r.stdout.strip()}")
    # Every rank refuses it, and the job ends without a hang.
    path = os.path.join(ROOT, "label_out_of_range.jsonl")
    r = run([MPIEXEC, "--oversubscribe", "-n", "2", KGPT, "eval", checkpoint, "--task", path], expect=2)
    check("out of range" in r.stderr, f"2 ranks: no message naming the label: {r.stderr.strip()}")


def check_training_scores(checkpoint, task):
    """The byte run scored the task at steps 0, 15 and 30 (train.task_eval_every 15, and the end):
    its log lines and history.h5's /task rows, the last equal to kgpt eval --task of the final
    checkpoint."""
    run_dir = os.path.dirname(os.path.dirname(checkpoint))
    with open(os.path.join(run_dir, "log.txt")) as f:
        lines = [line for line in f if " task:byte_words_task " in line]
    check(len(lines) == 3 and lines[0].startswith("step:0/30 ") and lines[-1].startswith("step:30/30 "),
          f"the log's task lines: {lines}")
    with h5py.File(os.path.join(run_dir, "history.h5"), "r") as f:
        names = f["task"].attrs["names"]
        names = names.decode() if isinstance(names, bytes) else names
        steps, index = list(f["task/step"][()]), list(f["task/task"][()])
        acc, acc_norm, examples = f["task/acc"][()], f["task/acc_norm"][()], f["task/examples"][()]
    check(names.split("\n") == ["byte_words_task"], f"/task names: {names!r}")
    check(steps == [0, 15, 30] and index == [0, 0, 0], f"/task rows: steps {steps}, tasks {index}")
    check(list(examples) == [40, 40, 40], f"/task examples: {list(examples)}")
    count, final_acc, final_norm = kgpt_task(checkpoint, task)
    check(abs(acc[-1] - final_acc) < 1e-12 and abs(acc_norm[-1] - final_norm) < 1e-12,
          f"the history's last scores {acc[-1]}, {acc_norm[-1]} against kgpt eval's {final_acc}, {final_norm}")
    # kgpt inspect names each task's last scores.
    shown = run([KGPT, "inspect", os.path.join(run_dir, "history.h5")]).stdout
    check("task rows: 3" in shown and f"byte_words_task: acc {final_acc:g} acc_norm {final_norm:g} (step 30)" in shown,
          f"kgpt inspect of the history: {shown}")
    # postprocess/plot_history.py draws the tasks in a third panel: a wider image than without.
    import struct
    def png_width(path):
        with open(path, "rb") as f:
            return struct.unpack(">I", f.read(24)[16:20])[0]
    plot = os.path.join(SOURCE_DIR, "postprocess", "plot_history.py")
    with_tasks, without = os.path.join(ROOT, "with_tasks.png"), os.path.join(ROOT, "without_tasks.png")
    run(["/usr/bin/python3", plot, run_dir, "--out", with_tasks])
    run(["/usr/bin/python3", plot, os.path.join(ROOT, "spm", "run"), "--out", without])
    check(png_width(with_tasks) > 1.3 * png_width(without),
          f"plot_history.py: {png_width(with_tasks)} pixels wide with tasks, {png_width(without)} without")
    # A bad task file stops kgpt train with exit code 2 before it makes the run directory.
    bad = os.path.join(ROOT, "label_out_of_range.jsonl")
    bad_dir = os.path.join(ROOT, "bad_task_run")
    shards = os.path.join(ROOT, "byte", "shards")
    r = run([KGPT, "train", os.path.join(SOURCE_DIR, "inputs", "tiny_cpu.yaml"), "--run-dir", bad_dir,
             "--set", f"data.train_files={shards}/words_train_*.bin", "--set", f"data.val_files={shards}/words_val_*.bin",
             "--set", "train.val_tokens=512", "--set", f"data.task_files={bad}"], expect=2)
    check(f"{bad}:1: \"label\" 2 is out of range" in r.stderr, f"kgpt train with a bad task file: {r.stderr.strip()}")
    check(not os.path.exists(bad_dir), "kgpt train made its run directory before refusing the task file")


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    byte_task = task_file("byte")
    byte_checkpoint = train("byte", [], [f"data.task_files={byte_task}", "train.task_eval_every=15"])
    check_tokenizer("byte", byte_checkpoint, lambda text: list(text.encode("utf-8")), 256)
    check_bad_files(byte_checkpoint)

    # SentencePiece: a model trained on the same text, then the same run and task.
    import sentencepiece
    folder = os.path.join(ROOT, "spm_model")
    os.makedirs(folder)
    text = os.path.join(folder, "words.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write(training_text() + " ".join(ODD) + "\n")
    prefix = os.path.join(folder, "words")
    run([KGPT, "tokenizer", "train", "--input", text, "--vocab-size", "300", "--out", prefix, "--quiet",
         "--doc-delimiter", "%"])
    spm_checkpoint = train("spm", ["--tokenizer", "sentencepiece", "--model", prefix + ".model"],
                           ["data.tokenizer=sentencepiece", f"data.vocab_file={prefix}.model", "model.vocab_size=300"])
    task_file("spm")
    sp = sentencepiece.SentencePieceProcessor(model_file=prefix + ".model")
    check_tokenizer("spm", spm_checkpoint, lambda text: sp.encode(text), sp.bos_id())

    # tiktoken: GPT-2's ranks (from npm's package), the same run and task; the reference encodes
    # every context and ending with npm's tiktoken itself.
    import json
    modules = os.path.abspath(os.path.join(NPM_PREFIX, "node_modules"))
    vocab_dir = os.path.join(ROOT, "tiktoken_ranks")
    run([os.path.join(SOURCE_DIR, "scripts", "tiktoken_ranks.py"), modules, vocab_dir])
    gpt2 = os.path.join(vocab_dir, "gpt2.tiktoken")
    bpe_checkpoint = train("gpt2bpe", ["--tokenizer", "tiktoken", "--vocab", gpt2],
                           ["data.tokenizer=tiktoken", f"data.vocab_file={gpt2}", "model.vocab_size=50304",
                            "train.iterations=90"])  # 50,304 ids learn the chain more slowly than 300
    task_file("gpt2bpe")
    texts = sorted({e["ctx"] for e in task_examples(40)} | {" " + ending for e in task_examples(40) for ending in e["endings"]})
    job, answer = os.path.join(ROOT, "tiktoken_job.json"), os.path.join(ROOT, "tiktoken_answer.json")
    with open(job, "w") as f:
        json.dump({"encodings": ["gpt2"], "texts": [{"name": t, "text": t, "allow_special": False} for t in texts]}, f)
    run(["node", os.path.join(SOURCE_DIR, "tests", "data", "tiktoken_reference.cjs"), modules, job, answer])
    with open(answer) as f:
        encoded = {name: result["wasm"] for name, result in json.load(f)["gpt2"].items()}
    check_tokenizer("gpt2bpe", bpe_checkpoint, lambda text: encoded[text], 50256)
    # kgpt sample encodes the prompt and decodes what follows with the same ranks: the chain's words.
    sampled = run([KGPT, "sample", bpe_checkpoint, "--prompt", "the quick", "--max-new-tokens", "12",
                   "--temperature", "0"]).stdout
    continuation = sampled.split("the quick", 1)[-1].split()
    known = sum(w in WORDS for w in continuation)
    check(sampled.startswith("the quick") and len(continuation) >= 4 and known >= 0.75 * len(continuation),
          f"kgpt sample of the tiktoken model: {sampled!r}, {known} of its words are the chain's")
    check_training_scores(byte_checkpoint, byte_task)

    print(f"{'passed' if not failures else 'failed'}: {len(failures)} failures")
    sys.exit(1 if failures else 0)


main()
