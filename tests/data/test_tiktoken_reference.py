#!/usr/bin/python3
"""kgpt's tiktoken BPE against npm's tiktoken (Rust compiled to WebAssembly) and js-tiktoken, token
for token, for every encoding the npm package ships, on Debian's fortunes in six languages, man
pages, and texts made to stress the split patterns; then decode gives every text back.

The rank files are made from the npm package's encoders/*.json by scripts/tiktoken_ranks.py (as
tiktoken's own .tiktoken files, and GPT-2's encoder.json + vocab.bpe from its gpt2 ranks) in the
test's work folder; none is kept.

`kgpt prepare` must write the same shards on 1, 2 and 3 MPI ranks, and stop every rank with exit
code 2 on text with a NUL byte.

usage: test_tiktoken_reference.py KGPT SOURCE_DIR WORKDIR NPM_PREFIX MPIEXEC
"""
import base64
import glob
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys

KGPT, SOURCE_DIR, WORKDIR, NPM_PREFIX, MPIEXEC = sys.argv[1:6]
ROOT = os.path.join(WORKDIR, "tiktoken_reference")
MODULES = os.path.abspath(os.path.join(NPM_PREFIX, "node_modules"))
ENCODINGS = ["gpt2", "r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base"]
FORTUNES = "/usr/share/games/fortunes"
LIMIT = 1 << 19  # bytes of each language's fortunes (the English ones whole)
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


def write(name, data):
    path = os.path.join(ROOT, "texts", name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def fortunes(files, limit=None):
    """The files one after another; with a limit, cut at the last line break before it."""
    data = b""
    for path in files:
        if limit is not None and len(data) >= limit:
            break
        data += open(path, "rb").read()
    return data if limit is None or len(data) <= limit else data[:data.rindex(b"\n", 0, limit) + 1]


def texts():
    os.makedirs(os.path.join(ROOT, "texts"))
    made = []
    english = subprocess.run(["bash", os.path.join(SOURCE_DIR, "scripts", "english_fortunes.sh")], check=True,
                             capture_output=True, text=True).stdout.split()
    made.append(("fortunes-en", write("fortunes-en", fortunes(english)), False))
    chinese = [os.path.join(FORTUNES, n) for n in ("chinese", "song100", "tang300")]
    made.append(("fortunes-zh", write("fortunes-zh", fortunes(chinese, LIMIT)), False))
    for language in ("ru", "de", "es", "bg"):
        files = sorted(p for p in glob.glob(os.path.join(FORTUNES, language, "*"))
                       if os.path.isfile(p) and not os.path.islink(p) and not p.endswith(".dat"))
        check(files, f"no fortunes in {FORTUNES}/{language} (the setup installs fortunes-{language})")
        made.append((f"fortunes-{language}", write(f"fortunes-{language}", fortunes(files, LIMIT)), False))
    pages = sorted(glob.glob("/usr/share/man/man1/*.1.gz"))[:40] + sorted(glob.glob("/usr/share/man/man*/fortune*.gz"))
    check(pages, "no man pages in /usr/share/man")
    made.append(("man-pages", write("man-pages", b"".join(gzip.open(p).read() for p in pages)), False))
    stress = [
        " " * 1000 + "x" + " " * 7 + "\n" * 5 + "  \n \n\n\t\t\r\n\r\n" + " " * 3,
        "0123456789" * 50 + " 1 22 333 4444 55555 ١٢٣٤ ⅷ ½ 3.14159 1,000,000",
        "emoji 👍🏽 👨‍👩‍👧‍👦 🇩🇪 ✈️ 🤖🤖🤖 and skin tones 🖐🏿",
        "combining: e\u0301 a\u0308\u0304 \u0915\u094d\u0937 Z\u0351\u0352\u0353\u0354a\u0300lgo n\u0303 \u05e9\u05c1\u05b8",
        "contractions: it's IT'S They'RE we've I'M you'll he'D o'clock 'tis ſ'ſ x'ſ ABC'S Ǆ'Ll",
        "mixed CASE: HTTPServer camelCase ÀÉÎõü ǅungla ΑΒΓαβγ ДЖЗжз iPhone McDonald's",
        "punctuation!!! ??? ... --- /// \\\\ path/to/file.txt <html>&amp;</html> {\"a\": [1, 2]}\n\n!@#$%^&*()",
        "whitespace kinds:\u00a0nbsp\u2003em\u3000ideographic\u2028line\u2029para\u0085nel\u000bvt\u000cff end",
        "<|endoftext|> is text here, <|fim_prefix|> too",
    ]
    made.append(("stress", write("stress", "\n".join(stress).encode("utf-8")), False))
    # One document of 1.5 MB whose lines end in spaces, tabs or nothing: kgpt prepare encodes a long
    # document in parts, which must end where tiktoken's pieces end.
    endings = ["  ", " ", "\t", "", " \u3000", "."]
    lines = [f"Line {i} of a long document{endings[i % len(endings)]}" for i in range(40000)]
    made.append(("long-document", write("long-document", "\n".join(lines).encode("utf-8")), False))
    made.append(("invalid-utf8", write("invalid-utf8", b"ok \xff\xfe bad \xc3( \xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 "
                                        b"\xc0\xaf \xf4\x90\x80\x80 trunc\xe2\x82\xac fine\n\x80\x80 end \xf0"), False))
    made.append(("special", write("special", b"one<|endoftext|>two <|endoftext|> three<|fim_prefix|>x<|fim_suffix|>"
                                   b"<|endofprompt|><|endoftext|>"), True))
    return made


def kgpt(*args, stdin=None, ranks=0):
    command = [KGPT, *args] if not ranks else [MPIEXEC, "--oversubscribe", "-n", str(ranks), KGPT, *args]
    result = subprocess.run(command, capture_output=True, input=stdin, timeout=600,
                            env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    if result.returncode != 0:
        failures.append(f"kgpt {' '.join(args)}: exit {result.returncode}: {result.stderr.decode(errors='replace')}")
        print("FAIL:", failures[-1])
    return result.stdout


def main():
    if not os.path.isdir(os.path.join(MODULES, "tiktoken")) or not os.path.isdir(os.path.join(MODULES, "js-tiktoken")):
        sys.exit(f"npm's tiktoken and js-tiktoken are not in {MODULES} (scripts/setup.sh installs them with npm)")
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    subprocess.run([os.path.join(SOURCE_DIR, "scripts", "tiktoken_ranks.py"), MODULES, ROOT], check=True)
    made = texts()
    job = os.path.join(ROOT, "job.json")
    json.dump({"encodings": ENCODINGS, "texts": [{"name": n, "path": p, "allow_special": s} for n, p, s in made]},
              open(job, "w"))
    reference_file = os.path.join(ROOT, "reference.json")
    subprocess.run(["node", os.path.join(SOURCE_DIR, "tests", "data", "tiktoken_reference.cjs"), MODULES, job,
                    reference_file], check=True, timeout=900)
    reference = json.load(open(reference_file))

    vocabularies = [(name, os.path.join(ROOT, name + ".tiktoken"), name) for name in ENCODINGS]
    vocabularies.append(("gpt2 (encoder.json)", os.path.join(ROOT, "encoder.json"), "gpt2"))
    compared = tokens = 0
    for label, vocab, encoding in vocabularies:
        for name, path, allow_special in made:
            expected = reference[encoding][name]
            extra = ["--allow-special"] if allow_special else []
            out = kgpt("tokenizer", "encode", "--tokenizer", "tiktoken", "--vocab", vocab, "--input", path, *extra)
            ids = [int(x) for x in out.split()]
            first = next((i for i, (a, b) in enumerate(zip(ids, expected["wasm"])) if a != b),
                         min(len(ids), len(expected["wasm"])))
            check(ids == expected["wasm"],
                  f"{label} on {name}: kgpt's {len(ids)} tokens differ from tiktoken's {len(expected['wasm'])} "
                  f"from token {first}: kgpt {ids[first:first + 8]}, tiktoken {expected['wasm'][first:first + 8]}")
            check(expected["js"] == expected["wasm"], f"{label} on {name}: js-tiktoken differs from tiktoken")
            compared += 1
            tokens += len(ids)
            decoded = kgpt("tokenizer", "decode", "--tokenizer", "tiktoken", "--vocab", vocab, stdin=out)
            check(decoded == base64.b64decode(expected["text"]),
                  f"{label} on {name}: decode does not give back the text tiktoken encoded")
            if name not in ("invalid-utf8",):
                check(decoded == open(path, "rb").read(), f"{label} on {name}: decode does not give back the file")
    # kgpt prepare: the English fortunes as one document of GPT-2 tokens, <|endoftext|> first, as
    # tiktoken encodes the whole file (prepare encodes long documents in parts).
    for label, vocab, name in (("gpt2", os.path.join(ROOT, "gpt2.tiktoken"), "fortunes-en"),
                               ("encoder.json", os.path.join(ROOT, "encoder.json"), "fortunes-en"),
                               ("gpt2", os.path.join(ROOT, "gpt2.tiktoken"), "long-document")):
        out_dir = os.path.join(ROOT, f"shards-{label}-{name}")
        kgpt("prepare", "--tokenizer", "tiktoken", "--vocab", vocab, "--input", os.path.join(ROOT, "texts", name),
             "--out", out_dir, "--prefix", "en", "--val-fraction", "0", "--quiet")
        shard = os.path.join(out_dir, "en_train_000000.bin")
        raw = open(shard, "rb").read() if os.path.exists(shard) else b""
        header = struct.unpack("<3i", raw[:12]) if len(raw) >= 1024 else (0, 0, 0)
        tokens_in_shard = list(struct.unpack(f"<{header[2]}H", raw[1024:1024 + 2 * header[2]])) if header[2] > 0 else []
        expected = [50256] + reference["gpt2"][name]["wasm"]
        check(tokens_in_shard == expected,
              f"kgpt prepare --vocab {label} of {name}: {len(tokens_in_shard)} tokens in {shard}, tiktoken gives "
              f"{len(expected)}")
    # The shard's first tokens as text, by kgpt inspect and shard_info.py --peek, from its prepare record.
    by_id = {}
    for line in open(os.path.join(ROOT, "gpt2.tiktoken")):
        token, rank = line.split()
        by_id[int(rank)] = base64.b64decode(token)
    first = b"<|endoftext|>" + b"".join(by_id[t] for t in reference["gpt2"]["fortunes-en"]["wasm"][:29])
    shard = os.path.join(ROOT, "shards-gpt2-fortunes-en", "en_train_000000.bin")
    inspect = kgpt("inspect", shard).decode()
    check("tokenizer tiktoken, encoding gpt2" in inspect and "1 documents start in it (token 50256" in inspect,
          f"kgpt inspect of a tiktoken shard: {inspect}")
    check(first.decode().split("\n")[0] in inspect, f"kgpt inspect shows the shard's text: {inspect}")
    peek = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "postprocess", "shard_info.py"), "--kgpt", KGPT,
                           "--peek", "30", "--csv", shard], capture_output=True)
    check(peek.returncode == 0 and first in peek.stdout, f"shard_info.py --peek: {peek.stdout[:300]} {peek.stderr}")
    check(peek.stdout.split(b"\n")[1].endswith(b",1"), f"shard_info.py counts one document: {peek.stdout[:200]}")
    # MPI ranks share the encoding; rank 0 writes what one rank writes.
    shards = {}
    for ranks in (1, 2, 3):
        out_dir = os.path.join(ROOT, f"ranks-{ranks}")
        kgpt("prepare", "--tokenizer", "tiktoken", "--vocab", os.path.join(ROOT, "gpt2.tiktoken"), "--input",
             os.path.join(ROOT, "texts", "fortunes-en"), os.path.join(ROOT, "texts", "fortunes-de"), "--out", out_dir,
             "--prefix", "p", "--doc-delimiter", "%", "--val-fraction", "0.05", "--shard-tokens", "200000", "--quiet",
             ranks=ranks)
        shards[ranks] = {name: open(os.path.join(out_dir, name), "rb").read()
                         for name in sorted(os.listdir(out_dir)) if name.endswith(".bin")}
    check(len(shards[1]) >= 4, f"prepare on one rank: {sorted(shards[1])}, want several train shards and a val shard")
    for ranks in (2, 3):
        check(shards[ranks] == shards[1], f"prepare on {ranks} ranks writes other shards than on one: {sorted(shards[ranks])}")
    # A deck whose model has fewer ids than the encoding is refused, naming the key and the file.
    deck = os.path.join(SOURCE_DIR, "inputs", "gpt2_tiny_cpu.yaml")
    sets = ["--set", f"data.train_files={ROOT}/ranks-1/p_train_*.bin", "--set", f"data.val_files={ROOT}/ranks-1/p_val_*.bin",
            "--set", f"data.vocab_file={ROOT}/gpt2.tiktoken"]
    result = subprocess.run([KGPT, "check", deck, *sets, "--set", "model.vocab_size=50000"], capture_output=True,
                            text=True, timeout=120)
    check(result.returncode == 2 and "data.vocab_file" in result.stderr and
          "ids up to 50256 (its special tokens included), beyond model.vocab_size = 50000" in result.stderr,
          f"kgpt check with model.vocab_size 50000: exit {result.returncode}, {result.stderr.strip()}")
    result = subprocess.run([KGPT, "check", deck, *sets], capture_output=True, text=True, timeout=120)
    check(result.returncode == 0, f"kgpt check of the GPT-2 tiny deck on these shards: {result.stderr.strip()}")
    nul = write("nul", b"fine\nstill fine\nbroken \x00 here\n")
    result = subprocess.run([MPIEXEC, "--oversubscribe", "-n", "2", KGPT, "prepare", "--tokenizer", "tiktoken", "--vocab",
                             os.path.join(ROOT, "gpt2.tiktoken"), "--input", nul, "--out", os.path.join(ROOT, "nul-out"),
                             "--quiet"], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    check(result.returncode == 2 and f"{nul}:3:8: a NUL byte" in result.stderr,
          f"2 ranks on text with a NUL byte: exit {result.returncode}, {result.stderr.strip()}")
    check(not os.path.exists(os.path.join(ROOT, "nul-out")), "a refused prepare made its output folder")
    print(f"{compared} texts and encodings compared, {tokens:,} tokens, each equal to tiktoken's and js-tiktoken's")
    if failures:
        sys.exit(f"{len(failures)} failures")


main()
