// The kgpt executable, run for real: help, version, exit codes and messages, and the files that
// `prepare` and `train` leave behind.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "core/backend.hpp"
#include "data/shard.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using kgpt::test::read_file;
using kgpt::test::run_kgpt;
using kgpt::test::TempDir;
using kgpt::test::write_file;

namespace {

const std::string source_dir = KGPT_SOURCE_DIR;

// Makes byte shards in <dir>/data from a few lines of text, through the CLI.
void prepare_data(const TempDir& dir) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "fortune number " + std::to_string(i) + " says hello\n%\n";
  write_file(dir.file("text.txt"), text);
  const auto r = run_kgpt({"prepare", "--input", dir.file("text.txt"), "--out", dir.file("data"), "--val-fraction",
                           "0.1", "--doc-delimiter", "%", "--prefix", "tiny", "--quiet"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.out.find("prepared 200 documents (20 val)") != std::string::npos);
}

std::string small_deck(const TempDir& dir) {
  return "model:\n  vocab_size: 257\n  n_layer: 2\n  d_model: 32\n  n_head: 2\n  n_kv_head: 1\n"
         "data:\n  train_files: " + dir.file("data/tiny_train_*.bin") + "\n  val_files: " + dir.file("data/tiny_val_*.bin") +
         "\n  tokenizer: byte\ntrain:\n  seq_len: 16\n  global_batch_tokens: 512\n";
}

}  // namespace

TEST_CASE("kgpt --help, help for every subcommand, and --version", "[app]") {
  const auto help = run_kgpt({"--help"});
  CHECK(help.exit_code == 0);
  for (const char* command : {"train", "check", "prepare", "bench"}) {
    INFO(command);
    CHECK(help.out.find(std::string("  ") + command) != std::string::npos);
    const auto sub = run_kgpt({command, "--help"});
    CHECK(sub.exit_code == 0);
    CHECK(sub.out.rfind(std::string("usage: kgpt ") + command, 0) == 0);
    CHECK(run_kgpt({"help", command}).out == sub.out);
  }
  const auto none = run_kgpt({});
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("usage: kgpt COMMAND") != std::string::npos);

  const auto version = run_kgpt({"--version"});
  CHECK(version.exit_code == 0);
  CHECK(version.out.rfind("kgpt 0.1.0 (git ", 0) == 0);
  for (const char* part : {"Kokkos ", "backends: ", "Kokkos Kernels ", "MPI: ", "HDF5 1.", "yaml-cpp ", "NCCL: ", "cuDNN: "}) {
    INFO(part);
    CHECK(version.out.find(part) != std::string::npos);
  }
}

TEST_CASE("unknown commands and options exit 2 with a suggestion", "[app]") {
  const auto r = run_kgpt({"chekc", "x.yaml"});
  CHECK(r.exit_code == 2);
  CHECK(r.err == "kgpt: error: unknown command 'chekc' (did you mean 'check'?); see kgpt --help\n");
  const auto o = run_kgpt({"check", "x.yaml", "--wrld-size", "2"});
  CHECK(o.exit_code == 2);
  CHECK(o.err == "kgpt check: error: unknown option --wrld-size (did you mean --world-size?); see kgpt check --help\n");
  const auto v = run_kgpt({"check", "x.yaml", "--world-size"});
  CHECK(v.exit_code == 2);
  CHECK(v.err.find("option --world-size needs a value (N)") != std::string::npos);
  const auto w = run_kgpt({"check", source_dir + "/inputs/tiny_cpu.yaml", "--world-size", "0", "--no-data"});
  CHECK(w.exit_code == 2);
  CHECK(w.err.find("option --world-size: 0 is out of range") != std::string::npos);
  const auto p = run_kgpt({"train"});
  CHECK(p.exit_code == 2);
  CHECK(p.err == "kgpt train: error: missing argument DECK; usage: kgpt train DECK [--set section.key=value]... "
                 "[--run-dir DIR | --run-suffix S] [--resume | --auto-resume]\n");
}

// Every command that `kgpt --help` lists, read from its overview.
std::vector<std::string> listed_commands() {
  const auto help = run_kgpt({"--help"});
  std::vector<std::string> names;
  std::istringstream lines(help.out.substr(help.out.find("commands:\n") + 10));
  for (std::string line; std::getline(lines, line) && line.rfind("  ", 0) == 0;) {
    names.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  return names;
}

TEST_CASE("every command's usage line lists its options, and a missing argument is named in one message", "[app]") {
  const std::vector<std::string> names = listed_commands();
  REQUIRE(names.size() >= 10);
  // The positional argument each command needs first, as its message must name it.
  const std::map<std::string, std::string> first_argument = {
      {"train", "DECK"}, {"check", "DECK"}, {"tokenizer", "train"}, {"bench", "DECK"},
      {"eval", "CKPT|ARTIFACT"}, {"sample", "CKPT|ARTIFACT"}, {"export", "CKPT"}, {"inspect", "FILE|RUN_DIR"},
      {"sweep", "SWEEP.yaml"}, {"prepare", "--input FILE..."}, {"golf-check", "RUN_DIR..."}};
  for (const std::string& name : names) {
    INFO(name);
    const auto help = run_kgpt({name, "--help"});
    REQUIRE(help.exit_code == 0);
    const std::string usage = help.out.substr(0, help.out.find("\n\n"));
    const std::string options = help.out.substr(help.out.find("\noptions:\n"));
    std::istringstream lines(options);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("  --", 0) != 0 || line.rfind("  --help", 0) == 0) continue;
      const std::string option = line.substr(2, line.find(' ', 2) - 2);
      INFO(option);
      const bool listed = usage.find(option + " ") != std::string::npos || usage.find(option + "]") != std::string::npos ||
                          usage.find(option + "\n") != std::string::npos || usage.substr(usage.size() - option.size()) == option;
      CHECK(listed);
    }
    const auto bare = run_kgpt({name});
    CHECK(bare.exit_code == 2);
    // One line, one prefix, and the argument named.
    CHECK(std::count(bare.err.begin(), bare.err.end(), '\n') == 1);
    CHECK(bare.err.rfind("kgpt " + name + ": error: missing ", 0) == 0);
    CHECK(bare.err.find("error: " + name + ":") == std::string::npos);
    REQUIRE(first_argument.count(name) == 1);
    const std::string& argument = first_argument.at(name);
    const bool named = bare.err.find("missing argument " + argument + "; usage: kgpt " + name) != std::string::npos ||
                       bare.err.find("missing " + argument + " (") != std::string::npos;
    CHECK(named);
  }
  const auto export_no_out = run_kgpt({"export", "x.h5"});
  CHECK(export_no_out.err == "kgpt export: error: missing --out FILE (the artifact to write) or --out DIR with --format hf\n");
  const auto prepare_no_out = run_kgpt({"prepare", "--input", "x.txt"});
  CHECK(prepare_no_out.err == "kgpt prepare: error: missing --out DIR (the folder for the shards)\n");
}

TEST_CASE("kgpt check refuses every bad deck with exit code 2 and the key's line:column", "[app][bad]") {
  const std::string dir = source_dir + "/tests/config/bad_decks";
  DIR* listing = ::opendir(dir.c_str());
  REQUIRE(listing != nullptr);
  int checked = 0;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.size() < 6 || name.substr(name.size() - 5) != ".yaml") continue;
    const std::string text = read_file(dir + "/" + name);
    const auto expect = text.find("# expect: ");
    REQUIRE(expect != std::string::npos);
    std::string world = "1";
    if (text.rfind("# world_size: ", 0) == 0) world = text.substr(14, text.find('\n') - 14);
    // Run from tests/config so that messages show bad_decks/<name> as the unit test expects.
    const auto r = run_kgpt({"check", "bad_decks/" + name, "--world-size", world, "--no-data"}, source_dir + "/tests/config");
    INFO(name << "\n" << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("kgpt check: error: ", 0) == 0);
    const std::string location = text.substr(expect + 10, text.find(' ', expect + 10) - expect - 10);
    if (location.find(':') != std::string::npos && location.find('|') == std::string::npos &&
        std::all_of(location.begin(), location.end(), [](char c) { return std::isdigit(c) || c == ':'; })) {
      CHECK(r.err.rfind("kgpt check: error: bad_decks/" + name + ":" + location + ": ", 0) == 0);
    }
    ++checked;
  }
  ::closedir(listing);
  CHECK(checked >= 15);
}

TEST_CASE("kgpt prepare, check and train on real shards", "[app]") {
  TempDir dir;
  prepare_data(dir);
  write_file(dir.file("small.yaml"), small_deck(dir));

  const auto check = run_kgpt({"check", dir.file("small.yaml"), "--set", "train.iterations=7"});
  INFO(check.err);
  REQUIRE(check.exit_code == 0);
  CHECK(check.out.find("  iterations: 7") != std::string::npos);
  CHECK(check.out.find("# --set train.iterations=7") != std::string::npos);
  CHECK(check.err.find("is valid for world size 1; 1 train shards") != std::string::npos);
  CHECK(check.err.find(" windows of 16 back to back") != std::string::npos);
  // What sliding windows cost an evaluation.
  const auto sliding = run_kgpt({"check", dir.file("small.yaml"), "--set", "train.eval_stride=8"});
  INFO(sliding.err);
  CHECK(sliding.err.find(" windows of 16 (train.eval_stride 8: ") != std::string::npos);

  // A glob that matches nothing names the key, its line:column and the pattern.
  const auto missing = run_kgpt({"check", dir.file("small.yaml"), "--set", "data.val_files=" + dir.file("nope_*.bin")});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err == "kgpt check: error: data.val_files (--set data.val_files=" + dir.file("nope_*.bin") +
                           "): no file matches '" + dir.file("nope_*.bin") +
                           "' (relative paths are relative to the working directory; `kgpt prepare` makes shards)\n");
  // A corrupt shard is named with the deck key that found it.
  write_file(dir.file("data/tiny_val_000001.bin"), "garbage");
  const auto corrupt = run_kgpt({"check", dir.file("small.yaml")});
  CHECK(corrupt.exit_code == 2);
  CHECK(corrupt.err.find(dir.file("small.yaml") + ":9:14: data.val_files: " + dir.file("data/tiny_val_000001.bin") +
                         ": shard is truncated") != std::string::npos);
  std::remove(dir.file("data/tiny_val_000001.bin").c_str());

  // train: validates, creates the run directory with the resolved deck, trains, never overwrites it.
  const std::string run_dir = dir.file("runs/first");
  const auto train = run_kgpt({"train", dir.file("small.yaml"), "--run-dir", run_dir, "--set", "train.iterations=3"});
  INFO(train.out << train.err);
  CHECK(train.exit_code == 0);
  CHECK(train.out.find("tokens_per_step:512 world_size:1 grad_accum_steps:8 micro_batch:4x16") != std::string::npos);
  CHECK(train.out.find("step:0/3 val_loss:") != std::string::npos);
  CHECK(train.out.find("step:1/3 train_loss:") != std::string::npos);
  CHECK(train.out.find("step:3/3 val_loss:") != std::string::npos);
  const std::string resolved = read_file(run_dir + "/deck.yaml");
  CHECK(resolved.find("  iterations: 3") != std::string::npos);
  CHECK(read_file(run_dir + "/deck.source.yaml") == small_deck(dir));
  CHECK(read_file(run_dir + "/log.txt") == train.out);
  const auto again = run_kgpt({"train", dir.file("small.yaml"), "--run-dir", run_dir});
  CHECK(again.exit_code == 2);
  CHECK(again.err.find("run directory already holds a run") != std::string::npos);
  CHECK(read_file(run_dir + "/deck.yaml") == resolved);

  // inspect of the run directory: its history, its newest checkpoint and the end of its log.
  const auto inspect = run_kgpt({"inspect", run_dir});
  INFO(inspect.out << inspect.err);
  CHECK(inspect.exit_code == 0);
  CHECK(inspect.out.rfind(run_dir + ": kgpt run directory\n", 0) == 0);
  CHECK(inspect.out.find("  train rows: 3 (steps 1-3)") != std::string::npos);
  CHECK(inspect.out.find("  checkpoints: 1, newest " + run_dir + "/checkpoints/ckpt_00000003.h5 (step 3)\n") !=
        std::string::npos);
  CHECK(inspect.out.find("  log.txt, its last 6 lines:\n") != std::string::npos);
  CHECK(inspect.out.find("    done steps:3 run_dir:" + run_dir + "\n") != std::string::npos);
  const auto not_a_run = run_kgpt({"inspect", dir.file("data")});
  CHECK(not_a_run.exit_code == 2);
  CHECK(not_a_run.err == "kgpt inspect: error: " + dir.file("data") +
                             ": a folder, but not a kgpt run directory (it holds no deck.yaml, log.txt or history.h5)\n");

  // Resuming a finished run says how to train on, and a larger count does.
  const auto finished = run_kgpt({"train", dir.file("small.yaml"), "--run-dir", run_dir, "--resume", "--set",
                                  "train.iterations=3"});
  CHECK(finished.exit_code == 0);
  CHECK(finished.out.find("note: " + run_dir + "/checkpoints/ckpt_00000003.h5 is at step 3 and train.iterations is 3, "
                          "so no step is left; to train on, resume with a larger count") != std::string::npos);
  CHECK(finished.out.find("step:4/") == std::string::npos);
  const auto longer = run_kgpt({"train", dir.file("small.yaml"), "--run-dir", run_dir, "--resume", "--set",
                                "train.iterations=4"});
  CHECK(longer.exit_code == 0);
  CHECK(longer.out.find("step:4/4 train_loss:") != std::string::npos);
  CHECK(longer.out.find("note: ") == std::string::npos);

  // bench runs the deck's model on synthetic tokens and prints figures (never judged by speed).
  const auto bench = run_kgpt({"bench", dir.file("small.yaml"), "--steps", "1", "--warmup", "1", "--gemm-size", "64"});
  INFO(bench.err);
  CHECK(bench.exit_code == 0);
  for (const char* field : {"tok/s:", "step_ms:", "model_gflops:", "sgemm_gflops:", "ratio:", "peak_rss_mb:", "view_peak_mb:",
                            "stall_watchdog:600s (this rank) watchdog_ms_per_step:"}) {
    CHECK(bench.out.find(field) != std::string::npos);
  }
  CHECK(bench.out.find("profile steps:") == std::string::npos);
  // --profile adds the table: one row per op under each phase, the phases' totals, the rest.
  const auto profiled = run_kgpt({"bench", dir.file("small.yaml"), "--steps", "1", "--warmup", "1", "--gemm-size", "64",
                                  "--profile", "--profile-steps", "2"});
  INFO(profiled.out << profiled.err);
  CHECK(profiled.exit_code == 0);
  for (const char* row : {"profile steps:2 profiled_step_ms:", "forward      kgpt::cross_entropy::forward",
                          "backward     attention (gemm) backward", "optimizer    (phase total)",
                          "(outside ops: copies, host work, launches)", "ms/step      %   TFLOP/s"}) {
    CHECK(profiled.out.find(row) != std::string::npos);
  }
  // Products and attention end their rows with a rate; kernels end theirs with the share.
  const auto row_of = [&](const std::string& start) {
    const std::size_t at = profiled.out.find(start);
    return at == std::string::npos ? std::string() : profiled.out.substr(at, profiled.out.find('\n', at) - at);
  };
  const std::string attention_row = row_of("forward      attention (gemm) forward");
  CHECK(attention_row.size() == 78 + 10 + 1 + 10 + 1 + 6 + 1 + 9);
  CHECK(std::stod(attention_row.substr(attention_row.size() - 9)) > 0);
  CHECK(row_of("forward      kgpt::cross_entropy::forward").size() == 78 + 10 + 1 + 10 + 1 + 6);
  // A bf16 deck is read against a bf16 product too; only a GPU build measures a device copy.
  const auto bf16 = run_kgpt({"bench", dir.file("small.yaml"), "--steps", "1", "--warmup", "1", "--gemm-size", "64",
                              "--set", "train.precision=bf16"});
  INFO(bf16.err);
  CHECK(bf16.exit_code == 0);
  CHECK(bf16.out.find(" bf16_gemm_gflops:") != std::string::npos);
  CHECK(bf16.out.find(" bf16_ratio:") != std::string::npos);
  CHECK(bench.out.find("bf16_gemm_gflops") == std::string::npos);
  CHECK((bench.out.find(" copy_gbs:") != std::string::npos) == kgpt::backend::on_gpu);
  const auto lone = run_kgpt({"bench", dir.file("small.yaml"), "--profile-steps", "2"});
  CHECK(lone.exit_code == 2);
  CHECK(lone.err.find("--profile-steps: only meaningful with --profile") != std::string::npos);
  const auto no_warmup = run_kgpt({"bench", dir.file("small.yaml"), "--warmup", "0"});
  CHECK(no_warmup.exit_code == 2);
  CHECK(no_warmup.err.find("--warmup") != std::string::npos);

  // The resolved deck is itself a valid deck with the same values.
  const auto recheck = run_kgpt({"check", run_dir + "/deck.yaml"});
  CHECK(recheck.exit_code == 0);
  CHECK(recheck.out.find("  iterations: 3") != std::string::npos);

  // Bad deck through train: exit 2 and no run directory.
  const auto bad = run_kgpt({"train", dir.file("small.yaml"), "--run-dir", dir.file("runs/bad"), "--set", "model.n_head=3"});
  CHECK(bad.exit_code == 2);
  CHECK_FALSE(kgpt::test::file_exists(dir.file("runs/bad")));
}

// kgpt check is what a user runs before queueing a job: every problem with the data that stops
// `kgpt train` at start-up must stop `kgpt check` too, with the same message and exit code 2.
TEST_CASE("kgpt check finds every data problem that kgpt train finds at start-up", "[app][data]") {
  TempDir dir;
  prepare_data(dir);
  write_file(dir.file("small.yaml"), small_deck(dir));
  const std::string val = dir.file("data/tiny_val_000000.bin"), train = dir.file("data/tiny_train_000000.bin");
  const std::vector<std::uint16_t> good_val = kgpt::data::read_shard(val, 65536);
  const std::vector<std::uint16_t> good_train = kgpt::data::read_shard(train, 65536);
  std::vector<std::uint16_t> bad_id = good_val;
  bad_id[5] = 300;  // not below model.vocab_size = 257
  std::vector<std::uint16_t> bad_train = good_train;
  bad_train[7] = 257;
  const std::vector<std::uint16_t> short_val(good_val.begin(), good_val.begin() + 10);  // seq_len is 16
  const std::string second_val = dir.file("data/tiny_val_000001.bin");

  struct Case {
    const char* name;
    std::vector<std::uint16_t> val, train, second_val;  // no second val shard when empty
    std::string want;
  };
  const std::vector<Case> cases = {
      {"a token id beyond the vocabulary in the val split", bad_id, good_train, {},
       val + ": token 300 at index 5 is not below the vocabulary size 257 (model.vocab_size)"},
      {"a token id beyond the vocabulary in the first train shard", good_val, bad_train, {},
       train + ": token 257 at index 7 is not below the vocabulary size 257 (model.vocab_size)"},
      {"a val split shorter than seq_len + 1", short_val, good_train, {},
       "data.val_files: the val split holds fewer than seq_len + 1 = 17 tokens"},
      {"a token id beyond the vocabulary in a later val shard", good_val, good_train, bad_id,
       second_val + ": token 300 at index 5 is not below the vocabulary size 257 (model.vocab_size)"},
  };
  int run = 0;
  for (const Case& c : cases) {
    SECTION(c.name) {
      kgpt::data::write_shard(val, c.val);
      kgpt::data::write_shard(train, c.train);
      if (!c.second_val.empty()) kgpt::data::write_shard(second_val, c.second_val);
      const auto checked = run_kgpt({"check", dir.file("small.yaml")});
      const auto trained = run_kgpt({"train", dir.file("small.yaml"), "--run-dir", dir.file("runs/r" + std::to_string(run))});
      INFO(checked.err << trained.out << trained.err);
      CHECK(checked.exit_code == 2);
      CHECK(trained.exit_code == 2);
      CHECK(checked.err.find(c.want) != std::string::npos);
      const std::string prefix = "kgpt check: error: ";
      REQUIRE(checked.err.rfind(prefix, 0) == 0);
      CHECK(trained.err == "kgpt train: error: " + checked.err.substr(prefix.size()));
      CHECK_FALSE(kgpt::test::file_exists(dir.file("runs/r" + std::to_string(run))));
    }
    ++run;
  }
}

TEST_CASE("kgpt prepare names a missing input and keeps existing shards", "[app]") {
  TempDir dir;
  prepare_data(dir);
  const std::string before = read_file(dir.file("data/tiny_train_000000.bin"));
  const auto missing = run_kgpt({"prepare", "--input", dir.file("none.txt"), "--out", dir.file("data")});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err == "kgpt prepare: error: " + dir.file("none.txt") + ": cannot read input file: No such file or directory\n");
  const auto again = run_kgpt({"prepare", "--input", dir.file("text.txt"), "--out", dir.file("data"), "--prefix", "tiny"});
  CHECK(again.exit_code == 2);
  CHECK(again.err.find("pass --force to replace them") != std::string::npos);
  CHECK(read_file(dir.file("data/tiny_train_000000.bin")) == before);
  // Without --quiet, progress lines go to stderr and the summary to stdout.
  const auto forced = run_kgpt({"prepare", "--input", dir.file("text.txt"), "--out", dir.file("data"), "--prefix",
                                "tiny", "--doc-delimiter", "%", "--val-fraction", "0.1", "--force"});
  CHECK(forced.exit_code == 0);
  CHECK(forced.err.find("read (100%), 200 documents") != std::string::npos);
  CHECK(forced.out.find("prepared 200 documents (20 val)") != std::string::npos);
  CHECK(read_file(dir.file("data/tiny_train_000000.bin")) == before);  // same inputs, same shards
}

TEST_CASE("every shipped deck is valid", "[app][inputs]") {
  DIR* listing = ::opendir((source_dir + "/inputs").c_str());
  REQUIRE(listing != nullptr);
  int decks = 0;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.size() < 6 || name.substr(name.size() - 5) != ".yaml") continue;
    const auto r = run_kgpt({"check", "inputs/" + name, "--no-data"}, source_dir);
    INFO(name << "\n" << r.err);
    CHECK(r.exit_code == 0);
    ++decks;
  }
  ::closedir(listing);
  CHECK(decks >= 1);
}

TEST_CASE("kgpt sweep writes numbered decks and manifests only when every point is valid", "[app][sweep]") {
  TempDir dir;
  prepare_data(dir);
  write_file(dir.file("small.yaml"), small_deck(dir));
  write_file(dir.file("lr.yaml"), "base: " + dir.file("small.yaml") +
                                      "\nset:\n  train.iterations: 2\ngrid:\n  optim.matrix_lr: [0.02, 0.04]\n"
                                      "  run.seed: [1, 2]\n");
  const std::string out = dir.file("sweeps/lr");
  const auto sweep = run_kgpt({"sweep", dir.file("lr.yaml"), "--out", out, "--world-size", "2"});
  INFO(sweep.out << sweep.err);
  REQUIRE(sweep.exit_code == 0);
  CHECK_THAT(sweep.out, Catch::Contains("sweep lr: 4 points from " + dir.file("small.yaml") +
                                        ", every deck valid for world size 2; data checked"));
  CHECK_THAT(sweep.out, Catch::Contains("submit: sbatch --array=0-3%4 slurm/sweep.sbatch " + out));
  CHECK(read_file(out + "/manifest.csv") ==
        "index,deck,run_dir,optim.matrix_lr,run.seed\n0,decks/000.yaml,runs/000,0.02,1\n"
        "1,decks/001.yaml,runs/001,0.02,2\n2,decks/002.yaml,runs/002,0.04,1\n3,decks/003.yaml,runs/003,0.04,2\n");
  CHECK_THAT(read_file(out + "/manifest.json"), Catch::Contains("\"world_size\": 2"));
  CHECK(read_file(out + "/sweep.yaml") == read_file(dir.file("lr.yaml")));
  // Each deck is a valid deck of its own, with the point's values and its run directory.
  const auto check = run_kgpt({"check", out + "/decks/002.yaml", "--world-size", "2"});
  INFO(check.err);
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.out, Catch::Contains("  matrix_lr: 0.04 "));
  CHECK_THAT(check.out, Catch::Contains("  seed: 1 "));
  CHECK_THAT(check.out, Catch::Contains("  iterations: 2 "));
  CHECK_THAT(check.out, Catch::Contains("  out_dir: " + out + "/runs "));
  CHECK_THAT(check.out, Catch::Contains("  name: 002 "));
  const auto train = run_kgpt({"train", out + "/decks/002.yaml"});
  INFO(train.err);
  CHECK(train.exit_code == 0);
  CHECK(kgpt::test::file_exists(out + "/runs/002/history.h5"));

  // An existing sweep folder is never written over.
  const std::string manifest = read_file(out + "/manifest.csv");
  const auto again = run_kgpt({"sweep", dir.file("lr.yaml"), "--out", out});
  CHECK(again.exit_code == 2);
  CHECK(again.err == "kgpt sweep: error: --out " + out + ": already exists and is not empty (a sweep never overwrites one)\n");
  CHECK(read_file(out + "/manifest.csv") == manifest);

  // A point whose data is missing stops the sweep before anything is written; --no-data skips that check.
  write_file(dir.file("bad.yaml"), "base: " + dir.file("small.yaml") + "\nlist:\n  - {run.seed: 1}\n  - {data.val_files: " +
                                       dir.file("none_*.bin") + "}\n");
  const auto bad = run_kgpt({"sweep", dir.file("bad.yaml"), "--out", dir.file("sweeps/bad")});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("kgpt sweep: error: point 1: " + dir.file("bad.yaml") + ":4:22: data.val_files: no file matches"));
  CHECK_FALSE(kgpt::test::file_exists(dir.file("sweeps/bad")));
  CHECK(run_kgpt({"sweep", dir.file("bad.yaml"), "--out", dir.file("sweeps/bad"), "--no-data"}).exit_code == 0);
}

TEST_CASE("train --auto-resume and --run-suffix, for batch jobs that may be requeued", "[app][sweep]") {
  TempDir dir;
  prepare_data(dir);
  write_file(dir.file("small.yaml"), small_deck(dir) + "  iterations: 4\nrun:\n  out_dir: " + dir.file("runs") + "\n");
  // --run-suffix names the run directory after the job; --auto-resume starts a run that is not there.
  const auto first = run_kgpt({"train", dir.file("small.yaml"), "--run-suffix", "-77", "--auto-resume"});
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  const std::string run_dir = dir.file("runs/small-77");
  CHECK_THAT(first.out, Catch::Contains("run_dir:" + run_dir));
  CHECK_THAT(first.out, !Catch::Contains("resumed_from:"));
  CHECK(kgpt::test::file_exists(run_dir + "/checkpoints/ckpt_00000004.h5"));
  // Again (a requeued job that had finished): resumes from the last checkpoint and has nothing to do.
  const auto again = run_kgpt({"train", dir.file("small.yaml"), "--run-suffix", "-77", "--auto-resume"});
  INFO(again.out << again.err);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.out, Catch::Contains("resumed_from:" + run_dir + "/checkpoints/ckpt_00000004.h5 step:4"));
  CHECK_THAT(again.out, !Catch::Contains("train_loss:"));
  // A run directory made from other deck values is refused and left as it was.
  const std::string deck_before = read_file(run_dir + "/deck.yaml");
  const auto other = run_kgpt(
      {"train", dir.file("small.yaml"), "--run-suffix", "-77", "--auto-resume", "--set", "optim.matrix_lr=0.01"});
  CHECK(other.exit_code == 2);
  CHECK(other.err == "kgpt train: error: " + run_dir + ": holds a run made from other deck values (optim.matrix_lr differ from " +
                         dir.file("small.yaml") + "); choose another --run-dir, or move that run away\n");
  CHECK(read_file(run_dir + "/deck.yaml") == deck_before);
  // An attempt that died before its first checkpoint is started again in the same folder.
  const std::string died = dir.file("runs/died");
  REQUIRE(run_kgpt({"train", dir.file("small.yaml"), "--run-dir", died, "--set", "train.iterations=1"}).exit_code == 0);
  std::remove((died + "/checkpoints/ckpt_00000001.h5").c_str());
  const auto restart =
      run_kgpt({"train", dir.file("small.yaml"), "--run-dir", died, "--set", "train.iterations=1", "--auto-resume"});
  INFO(restart.out << restart.err);
  CHECK(restart.exit_code == 0);
  CHECK_THAT(restart.out, Catch::Contains("restart: " + died + " holds no checkpoint; starting the run again from step 0"));
  CHECK_THAT(restart.out, Catch::Contains("step:1/1 train_loss:"));
  // The first attempt's log lines are kept above the new ones.
  const std::string log = read_file(died + "/log.txt");
  CHECK(log.find("step:1/1 train_loss:") < log.find("restart: "));

  const auto both = run_kgpt({"train", dir.file("small.yaml"), "--resume", "--auto-resume"});
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.err, Catch::Contains("give --resume or --auto-resume, not both"));
  const auto slash = run_kgpt({"train", dir.file("small.yaml"), "--run-suffix", "a/b"});
  CHECK(slash.exit_code == 2);
  CHECK_THAT(slash.err, Catch::Contains("--run-suffix a/b: must not contain '/'"));
}

TEST_CASE("every shipped sweep expands", "[app][inputs][sweep]") {
  TempDir dir;
  const auto r = run_kgpt({"sweep", "inputs/sweeps/tiny_cpu_lr.yaml", "--out", dir.file("s"), "--no-data"}, source_dir);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("sweep tiny_cpu_lr: 4 points"));
}

TEST_CASE("kgpt check --device runs the deck's attention here and compares it with another implementation",
          "[app][device]") {
  TempDir dir;
  const std::string deck = dir.file("deck.yaml");
  // Head dimension 16: the host's gemm attention is compared with the fused kernels.
  write_file(deck, "model:\n  vocab_size: 257\n  n_layer: 2\n  d_model: 32\n  n_head: 2\n  n_kv_head: 1\n"
                   "data:\n  tokenizer: byte\ntrain:\n  seq_len: 64\n  global_batch_tokens: 4096\n");
  for (const char* precision : {"fp32", "bf16"}) {
    INFO(precision);
    const auto r = run_kgpt({"check", deck, "--no-data", "--device", "--set", std::string("train.precision=") + precision});
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("kgpt check: device: Serial") != std::string::npos);
#ifdef KGPT_HAVE_CUDNN
    const bool cudnn = std::string(precision) == "bf16";  // a cuDNN build's bf16 attention, checked against the gemm
#else
    const bool cudnn = false;
#endif
    CHECK(r.err.find(std::string(cudnn ? "attention cudnn (" : "attention gemm (") + precision +
                     ") at 8x64, 2 heads, 1 kv heads, head dim 16") != std::string::npos);
    CHECK(r.err.find(cudnn ? "against gemm on one sequence: " : "against fused on one sequence: ") != std::string::npos);
    // The head's products timed with rows 320 apart (257 rounded up to 64), the logits and dx
    // products 320 wide on a GPU and 257 on the host, then the other width, then rows 257 apart.
    const std::string as_trained = kgpt::backend::Traits::padded_head_products ? "320" : "257",
                      other = kgpt::backend::Traits::padded_head_products ? "257" : "320";
    CHECK(r.err.find("kgpt check: head products (logits, dx, dW) at 512 x 257 x 32 (" + std::string(precision) +
                     "): rows 320 apart, products " + as_trained + " wide, as trained: ") != std::string::npos);
    CHECK(r.err.find("; products " + other + " wide: ") != std::string::npos);
    CHECK(r.err.find("; rows 257 apart: ") != std::string::npos);
  }
  // A vocabulary of a multiple of 64 is kept as it is: one figure.
  const auto aligned = run_kgpt({"check", deck, "--no-data", "--device", "--set", "model.vocab_size=320"});
  INFO(aligned.err);
  CHECK(aligned.exit_code == 0);
  CHECK(aligned.err.find("at 512 x 320 x 32 (fp32): rows 320 apart, products 320 wide, as trained: ") != std::string::npos);
  CHECK(aligned.err.find(" wide: ") == std::string::npos);
  CHECK(aligned.err.find("; rows 320 apart: ") == std::string::npos);
  // golf's MLP has no GELU, gpt2's has: the products it rides in are timed (d_model 32, mlp_mult 4).
  CHECK(aligned.err.find("gelu products") == std::string::npos);
  for (const char* precision : {"fp32", "bf16"}) {
    INFO(precision);
    const auto gpt2 = run_kgpt({"check", deck, "--no-data", "--device", "--set", "model.family=gpt2", "--set",
                                "model.n_kv_head=2", "--set", std::string("train.precision=") + precision});
    INFO(gpt2.err);
    CHECK(gpt2.exit_code == 0);
    CHECK(gpt2.err.find("kgpt check: gelu products (up into GELU, down's dx through it) at 512 x 128 x 32 (" +
                        std::string(precision) + "): ") != std::string::npos);
    // The host has no such products (one figure); where cuBLASLt puts GELU into one (bf16 on a
    // GPU), both ways are timed and their outputs compared.
    if (gpt2.err.find("GELU in the product") != std::string::npos ||
        gpt2.err.find("backward in the product") != std::string::npos) {
      CHECK(kgpt::backend::on_gpu);
      CHECK(std::string(precision) == "bf16");
      CHECK(gpt2.err.find("; in the products ") != std::string::npos);
      CHECK(gpt2.err.find("; largest difference ") != std::string::npos);
    } else {
      CHECK(gpt2.err.find("forward GELU apart, backward apart; ") != std::string::npos);
    }
  }
  // Head dimension 12 has no fused kernel: nothing to compare with, said so.
  const auto odd = run_kgpt({"check", deck, "--no-data", "--device", "--set", "model.d_model=24"});
  INFO(odd.err);
  CHECK(odd.exit_code == 0);
  CHECK(odd.err.find("no other implementation to compare with") != std::string::npos);
}

TEST_CASE("kgpt tokenizer train on text too small for its vocabulary exits 2 naming the file", "[app][bad]") {
  // Two one-letter lines and 1024 pieces, with progress on: SentencePiece's BPE trainer once died of
  // a segmentation fault here (exit 139) with no message.
  TempDir dir;
  write_file(dir.file("two_lines.txt"), "a\nb\n");
  const auto r = run_kgpt({"tokenizer", "train", "--input", dir.file("two_lines.txt"), "--vocab-size", "1024", "--out",
                           dir.file("tk")});
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--vocab-size 1024 is more than the text of " + dir.file("two_lines.txt") + " can give: at most 262") !=
        std::string::npos);
  CHECK_FALSE(kgpt::test::file_exists(dir.file("tk.model")));
  write_file(dir.file("empty.txt"), "");
  const auto empty = run_kgpt({"tokenizer", "train", "--input", dir.file("empty.txt"), "--out", dir.file("tk")});
  CHECK(empty.exit_code == 2);
  CHECK(empty.err.find(dir.file("empty.txt") + ": no line to train a tokenizer on") != std::string::npos);
}
