// Sweep files: expansion of grids and lists into points, validation with line:column, manifests.
#include <catch2/catch.hpp>

#include "config/sweep.hpp"
#include "core/error.hpp"
#include "support/temp_dir.hpp"

using kgpt::config::expand_sweep;
using kgpt::config::Sweep;
using kgpt::test::TempDir;
using kgpt::test::write_file;

namespace {

const char* base_deck =
    "model:\n"
    "  vocab_size: 257\n"
    "  n_layer: 2\n"
    "  d_model: 64\n"
    "  n_head: 4\n"
    "  n_kv_head: 2\n"
    "data:\n"
    "  train_files: data/t_*.bin\n"
    "  val_files: data/v_*.bin\n"
    "  tokenizer: byte\n"
    "train:\n"
    "  seq_len: 32\n"
    "  global_batch_tokens: 1024\n"
    "  iterations: 10\n";

// Writes base.yaml and sweep.yaml into `dir`; the sweep's base names base.yaml by its full path.
std::string write_sweep(const TempDir& dir, const std::string& body) {
  write_file(dir.file("base.yaml"), base_deck);
  write_file(dir.file("sweep.yaml"), "base: " + dir.file("base.yaml") + "\n" + body);
  return dir.file("sweep.yaml");
}

std::string error_of(const TempDir& dir, const std::string& body, int world_size = 1) {
  try {
    expand_sweep(write_sweep(dir, body), dir.file("out"), world_size);
  } catch (const kgpt::InputError& e) {
    return e.what();
  }
  return "";
}

std::string values_of(const kgpt::config::SweepPoint& point) {
  std::string text;
  for (const auto& o : point.overrides) text += (text.empty() ? "" : " ") + o.key + "=" + o.value;
  return text;
}

}  // namespace

TEST_CASE("a grid expands to every combination, the last key varying fastest", "[config][sweep]") {
  TempDir dir;
  const Sweep sweep = expand_sweep(write_sweep(dir,
                                               "name: lr\n"
                                               "set:\n  train.iterations: 7\n"
                                               "grid:\n  optim.matrix_lr: [0.02, 0.04, 0.08]\n  run.seed: [1, 2]\n"),
                                   dir.file("out"), 1);
  CHECK(sweep.name == "lr");
  REQUIRE(sweep.points.size() == 6);
  CHECK(sweep.keys == std::vector<std::string>{"optim.matrix_lr", "run.seed"});
  CHECK(values_of(sweep.points[0]) == "optim.matrix_lr=0.02 run.seed=1");
  CHECK(values_of(sweep.points[1]) == "optim.matrix_lr=0.02 run.seed=2");
  CHECK(values_of(sweep.points[5]) == "optim.matrix_lr=0.08 run.seed=2");
  for (int i = 0; i < 6; ++i) {
    const auto& c = sweep.points[static_cast<std::size_t>(i)].deck.config;
    CHECK(sweep.points[static_cast<std::size_t>(i)].index == i);
    CHECK(c.train.iterations == 7);
    CHECK(c.run.out_dir == dir.file("out") + "/runs");
    CHECK(c.run.name == kgpt::config::point_name(sweep, i));
  }
  CHECK(sweep.points[4].deck.config.optim.matrix_lr == 0.08);
  CHECK(sweep.points[4].deck.config.run.seed == 1);
  // Values keep the sweep file's line:column as their origin.
  CHECK(sweep.points[4].deck.origin("optim.matrix_lr").describe() == dir.file("sweep.yaml") + ":6:33");
  CHECK(sweep.points[4].deck.origin("model.n_layer").describe() == dir.file("base.yaml") + ":3:12");
}

TEST_CASE("a list gives explicit points and combines with a grid", "[config][sweep]") {
  TempDir dir;
  Sweep sweep = expand_sweep(write_sweep(dir, "list:\n  - {model.n_layer: 1}\n  - {model.n_layer: 3, model.d_model: 96}\n"),
                             dir.file("out"), 1);
  REQUIRE(sweep.points.size() == 2);
  CHECK(sweep.name == "sweep");  // the sweep file's name
  CHECK(sweep.keys == std::vector<std::string>{"model.n_layer", "model.d_model"});
  CHECK(sweep.points[1].deck.config.model.d_model == 96);
  CHECK(sweep.points[0].deck.config.model.d_model == 64);

  sweep = expand_sweep(write_sweep(dir, "grid:\n  run.seed: [5, 6]\nlist:\n  - {model.n_layer: 1}\n  - {model.n_layer: 3}\n"),
                       dir.file("out"), 1);
  REQUIRE(sweep.points.size() == 4);
  CHECK(values_of(sweep.points[0]) == "run.seed=5 model.n_layer=1");
  CHECK(values_of(sweep.points[1]) == "run.seed=6 model.n_layer=1");
  CHECK(values_of(sweep.points[3]) == "run.seed=6 model.n_layer=3");
}

TEST_CASE("mistakes in a sweep file are all reported with their line:column", "[config][sweep]") {
  TempDir dir;
  const std::string path = dir.file("sweep.yaml");
  const std::string e = error_of(dir,
                                 "nme: x\n"
                                 "set:\n  train.iteratons: 5\n"
                                 "grid:\n  optim.matrix_lr: [0.02, fast]\n  run.name: [a, b]\n  run.seed: 3\n");
  CHECK_THAT(e, Catch::Contains(path + ":2:1: unknown field 'nme' (did you mean 'name'?)"));
  CHECK_THAT(e, Catch::Contains(path + ":4:3: unknown key 'train.iteratons' (did you mean 'train.iterations'?)"));
  CHECK_THAT(e, Catch::Contains(path + ":6:27: optim.matrix_lr: expected a number, got 'fast'"));
  CHECK_THAT(e, Catch::Contains(path + ":7:3: run.name is set by the sweep"));
  CHECK_THAT(e, Catch::Contains(path + ":8:3: grid: run.seed: expected a non-empty list of values"));

  CHECK_THAT(error_of(dir, "set:\n  run.seed: 1\n"), Catch::Contains("nothing to sweep"));
  CHECK_THAT(error_of(dir, "grid:\n  run.seed: [1]\nset:\n  run.seed: 2\n"),
             Catch::Contains(path + ":5:13: run.seed is also given in grid"));
  CHECK_THAT(error_of(dir, "grid: [1, 2]\n"), Catch::Contains(path + ":2:1: grid: expected a mapping"));
  CHECK_THAT(error_of(dir, "grid:\n  run.seed: [1, 2\n"), Catch::Contains("YAML syntax error"));
  CHECK_THAT(error_of(dir, "list:\n  - {}\n"), Catch::Contains("a list entry: expected a mapping"));

  // The base deck must exist.
  write_file(path, "base: " + dir.file("missing.yaml") + "\ngrid:\n  run.seed: [1, 2]\n");
  try {
    expand_sweep(path, dir.file("out"), 1);
    FAIL("no error for a missing base deck");
  } catch (const kgpt::InputError& e2) {
    CHECK_THAT(std::string(e2.what()), Catch::Contains(dir.file("missing.yaml") + ": cannot open the base deck"));
  }
}

TEST_CASE("points whose deck breaks a rule between keys are named with their values", "[config][sweep]") {
  TempDir dir;
  const std::string path = dir.file("sweep.yaml");
  const std::string e = error_of(dir, "grid:\n  model.n_head: [3, 4, 5]\n");
  CHECK_THAT(e, Catch::Contains("point 0 (model.n_head=3): " + dir.file("base.yaml") +
                                ":4:12: model.d_model: d_model = 64 is not divisible by model.n_head = 3 (" + path +
                                ":3:18)"));
  CHECK_THAT(e, Catch::Contains("point 2 (model.n_head=5)"));
  CHECK_THAT(e, !Catch::Contains("point 1"));
  // The batch plan is checked for the world size the points will run on.
  const std::string w = error_of(dir, "grid:\n  run.seed: [1, 2]\n", 3);
  CHECK_THAT(w, Catch::Contains("point 0 (run.seed=1)"));
  CHECK_THAT(w, Catch::Contains("train.accum_total"));
  CHECK(error_of(dir, "grid:\n  run.seed: [1, 2]\n", 4).empty());
}

TEST_CASE("a sweep of more than 10000 points is refused before any deck is built", "[config][sweep]") {
  TempDir dir;
  std::string values = "[";
  for (int i = 0; i < 101; ++i) values += (i ? ", " : "") + std::to_string(i + 1);
  values += "]";
  const std::string e = error_of(dir, "grid:\n  run.seed: " + values + "\n  train.iterations: " + values + "\n");
  CHECK_THAT(e, Catch::Contains("more than 10000 points"));
}

TEST_CASE("manifests list every point with its deck, run directory and values", "[config][sweep]") {
  TempDir dir;
  const Sweep sweep = expand_sweep(
      write_sweep(dir, "name: mix\nset:\n  run.seed: 9\nlist:\n  - {optim.matrix_lr: 0.02}\n  - {data.val_files: \"a,b\"}\n"),
      dir.file("out"), 2);
  CHECK(kgpt::config::render_manifest_csv(sweep) ==
        "index,deck,run_dir,optim.matrix_lr,data.val_files\n"
        "0,decks/000.yaml,runs/000,0.02,\n"
        "1,decks/001.yaml,runs/001,,\"a,b\"\n");
  const std::string json = kgpt::config::render_manifest_json(sweep);
  CHECK_THAT(json, Catch::Contains("\"sweep\": \"mix\""));
  CHECK_THAT(json, Catch::Contains("\"world_size\": 2"));
  CHECK_THAT(json, Catch::Contains("\"common\": {\"run.seed\": 9}"));
  CHECK_THAT(json, Catch::Contains(
                       "{\"index\": 0, \"deck\": \"decks/000.yaml\", \"run_dir\": \"runs/000\", \"overrides\": "
                       "{\"optim.matrix_lr\": 0.02}}"));
  CHECK_THAT(json, Catch::Contains("\"overrides\": {\"data.val_files\": \"a,b\"}}"));
  // A point's deck reads back as the same configuration.
  const std::string deck_text = kgpt::config::render_point_deck(sweep, sweep.points[1]);
  CHECK_THAT(deck_text, Catch::StartsWith("# kgpt sweep mix"));
  kgpt::config::DeckOptions options;
  options.world_size = 2;
  const auto back = kgpt::config::parse_deck(deck_text, "decks/001.yaml", options);
  CHECK(kgpt::config::differing_keys(back.config, sweep.points[1].deck.config).empty());
  CHECK(back.config.data.val_files == "a,b");
  CHECK(back.config.run.name == "001");
}
