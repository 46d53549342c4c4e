#include <catch2/catch.hpp>

#include <algorithm>

#include "config/deck.hpp"
#include "config/module_keys.hpp"
#include "config/schema.hpp"
#include "core/error.hpp"
#include "support/temp_dir.hpp"

using kgpt::config::Config;
using kgpt::config::DeckOptions;
using kgpt::config::Origin;
using kgpt::config::parse_deck;

namespace {

// Every key's value as text, for comparing whole configurations.
std::vector<std::string> snapshot(const Config& config) {
  std::vector<std::string> values;
  for (const auto& spec : kgpt::config::deck_schema()) {
    values.push_back(spec.dotted() + "=" + kgpt::config::value_text(spec.get(config)));
  }
  return values;
}

std::string error_of(const std::string& text, const DeckOptions& options = {}) {
  try {
    parse_deck(text, "deck.yaml", options);
  } catch (const kgpt::InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("keys left out keep their documented defaults", "[config]") {
  const auto deck = parse_deck("model:\n  n_layer: 9\n", "deck.yaml", {});
  CHECK(snapshot(deck.config) == snapshot(Config{}));
  const Config& c = deck.config;
  CHECK(c.model.family == std::string("golf"));
  CHECK(c.model.vocab_size == 1024);
  CHECK(c.model.d_model == 512);
  CHECK(c.model.n_head == 8);
  CHECK(c.model.n_kv_head == 4);
  CHECK(c.train.seq_len == 1024);
  CHECK(c.train.global_batch_tokens == 524288);
  CHECK(c.train.accum_total == 8);
  CHECK(c.optim.matrix_lr == 0.04);
  CHECK(c.optim.embed_lr == 0.05);
  CHECK(c.optim.head_lr == 0.008);
  CHECK(deck.origin("model.n_layer").kind == Origin::Kind::deck);
  CHECK(deck.origin("model.d_model").kind == Origin::Kind::default_value);
  CHECK(deck.origins.size() == 1);
  // Every key has an entry in the schema with a description.
  for (const auto& spec : kgpt::config::deck_schema()) {
    INFO(spec.dotted());
    CHECK(spec.doc.size() > 10);
  }
}

TEST_CASE("deck values land in typed fields with their line:column", "[config]") {
  const std::string text =
      "run:\n"
      "  name: small\n"
      "  seed: 7\n"
      "model:\n"
      "  family: gpt2\n"
      "  n_head: 4\n"
      "  n_kv_head: 4\n"
      "  d_model: 128\n"
      "  logit_softcap: 0\n"
      "train:\n"
      "  seq_len: 64\n"
      "  global_batch_tokens: 4096\n"
      "  schedule: cosine\n"
      "optim:\n"
      "  adam_eps: 1.0e-10\n";
  const auto deck = parse_deck(text, "small.yaml", {});
  CHECK(deck.config.run.name == "small");
  CHECK(deck.config.run.seed == 7);
  CHECK(deck.config.model.family == std::string("gpt2"));
  CHECK(deck.config.model.d_model == 128);
  CHECK(deck.config.model.logit_softcap == 0.0);
  CHECK(deck.config.train.schedule == kgpt::config::Schedule::cosine);
  CHECK(deck.config.optim.adam_eps == 1e-10);
  const Origin& o = deck.origin("train.global_batch_tokens");
  CHECK(o.kind == Origin::Kind::deck);
  CHECK(o.line == 12);
  CHECK(o.column == 24);
  CHECK(deck.where("train.global_batch_tokens") == "small.yaml:12:24: train.global_batch_tokens");
  CHECK(deck.where("train.iterations") == "train.iterations (default)");
  // world size 1, accum 8: 4096 / 8 = 512 tokens = 8 sequences of 64 per micro-step.
  CHECK(deck.plan.grad_accum_steps == 8);
  CHECK(deck.plan.local_tokens == 512);
  CHECK(deck.plan.local_sequences == 8);
  CHECK(deck.plan.grad_scale == 0.125);
}

TEST_CASE("overrides from --set win over the deck and are validated the same way", "[config]") {
  DeckOptions options;
  options.overrides = {"model.n_layer=3", "train.iterations=50", "model.n_layer=5", "data.train_files=a b/*.bin"};
  const auto deck = parse_deck("model:\n  n_layer: 2\n", "deck.yaml", options);
  CHECK(deck.config.model.n_layer == 5);
  CHECK(deck.config.train.iterations == 50);
  CHECK(deck.config.data.train_files == "a b/*.bin");
  CHECK(deck.origin("model.n_layer").describe() == "--set model.n_layer=5");
  CHECK(deck.where("train.iterations") == "train.iterations (--set train.iterations=50)");

  auto failing = [](std::vector<std::string> flags) {
    DeckOptions o;
    o.overrides = std::move(flags);
    return error_of("model:\n  n_layer: 2\n", o);
  };
  CHECK(failing({"model.nlayer=3"}) == "--set model.nlayer=3: unknown key 'model.nlayer' (did you mean 'model.n_layer'?)");
  CHECK(failing({"modle.n_layer=3"}).find("unknown key 'modle.n_layer' (did you mean 'model'?)") != std::string::npos);
  CHECK(failing({"model.n_layer=two"}) == "--set model.n_layer=two: model.n_layer: expected an integer, got 'two'");
  CHECK(failing({"train.seq_len=0"}).find("out of range") != std::string::npos);
  CHECK(failing({"n_layer"}).find("expected section.key=value") != std::string::npos);
  // A cross-field rule broken by an override names the override.
  CHECK(failing({"model.d_model=100"}).rfind("model.d_model (--set model.d_model=100): d_model = 100 is not divisible", 0) ==
        0);
}

TEST_CASE("the batch plan follows the world size", "[config]") {
  const std::string text = "train:\n  seq_len: 16\n  global_batch_tokens: 1024\n  accum_total: 8\n";
  for (int world : {1, 2, 4, 8}) {
    DeckOptions options;
    options.world_size = world;
    const auto deck = parse_deck(text, "deck.yaml", options);
    INFO("world " << world);
    CHECK(deck.plan.grad_accum_steps == 8 / world);
    CHECK(deck.plan.local_tokens == 128);  // 1024 / (world x 8 / world)
    CHECK(deck.plan.local_sequences == 8);
    CHECK(deck.plan.world_size * deck.plan.grad_accum_steps * deck.plan.local_tokens == 1024);
  }
  DeckOptions three;
  three.world_size = 3;
  CHECK(error_of(text, three) ==
        "deck.yaml:4:16: train.accum_total: train.accum_total = 8 is not divisible by the world size 3 "
        "(grad_accum_steps = accum_total / world_size must be a whole number)");
  DeckOptions sixteen;
  sixteen.world_size = 16;
  CHECK(error_of(text, sixteen).find("not divisible by the world size 16") != std::string::npos);
}

TEST_CASE("the resolved deck reads back to the same configuration", "[config]") {
  DeckOptions options;
  options.overrides = {"run.name=with: colon", "data.val_files=*val*.bin", "optim.adam_eps=3e-9"};
  const auto deck = parse_deck("model:\n  family: gpt2\n  n_kv_head: 8\ntrain:\n  seq_len: 256\n", "in.yaml", options);
  const std::string resolved = kgpt::config::render_resolved(deck);
  CHECK(resolved.find("  family: gpt2") != std::string::npos);
  CHECK(resolved.find("# in.yaml:2:11") != std::string::npos);
  CHECK(resolved.find("# --set optim.adam_eps=3e-9") != std::string::npos);
  const auto again = parse_deck(resolved, "resolved.yaml", {});
  CHECK(snapshot(again.config) == snapshot(deck.config));
  CHECK(again.config.run.name == "with: colon");
  CHECK(again.config.data.val_files == "*val*.bin");
  // Every key is written, so the resolved deck stands alone.
  for (const auto& key : kgpt::config::all_keys()) CHECK(again.origin(key).kind == Origin::Kind::deck);
}

TEST_CASE("docs/deck-reference.md is the generated reference", "[config][docs]") {
  const std::string reference = kgpt::config::render_reference();
  for (const auto& key : kgpt::config::all_keys()) {
    const std::string name = key.substr(key.find('.') + 1);
    CHECK(reference.find("| `" + name + "` |") != std::string::npos);
  }
  const std::string path = std::string(KGPT_SOURCE_DIR) + "/docs/deck-reference.md";
  INFO("regenerate with: build/kgpt check --reference > docs/deck-reference.md");
  CHECK(kgpt::test::read_file(path) == reference);
}

TEST_CASE("kgpt train --resume holds the model's own keys to the checkpoint's, and frees how it is computed", "[config]") {
  std::vector<std::string> fixed, free_keys;
  for (const auto& spec : kgpt::config::deck_schema()) {
    if (spec.fixed_for_run) fixed.push_back(spec.dotted());
    // Every key of the model's configuration (model.*, and train.precision and train.recompute*
    // that live in it) is one or the other; no other key is fixed.
    const bool of_model = spec.section == "model" || spec.dotted() == "train.precision" ||
                          spec.dotted().rfind("train.recompute", 0) == 0;
    if (of_model && !spec.fixed_for_run) free_keys.push_back(spec.dotted());
    if (!of_model) CHECK_FALSE(spec.fixed_for_run);
  }
  std::sort(free_keys.begin(), free_keys.end());
  CHECK(free_keys == std::vector<std::string>{"model.attention", "model.attention_deterministic", "model.gelu_epilogue",
                                              "model.init_from", "model.qk_gain_init", "model.tied_embed_init_std",
                                              "train.recompute", "train.recompute_every"});
  for (const char* key : {"model.family", "model.n_layer", "model.logit_softcap", "model.recur_start",
                          "model.recur_count", "model.parallel_residual_start", "model.fp8", "train.precision"}) {
    INFO(key);
    CHECK(std::find(fixed.begin(), fixed.end(), key) != fixed.end());
  }
}

TEST_CASE("deck files that cannot be read are named", "[config]") {
  kgpt::test::TempDir dir;
  try {
    kgpt::config::load_deck(dir.file("missing.yaml"), {});
    FAIL("a missing deck was accepted");
  } catch (const kgpt::InputError& e) {
    CHECK(std::string(e.what()) == dir.file("missing.yaml") + ": cannot open the deck file (does it exist and is it readable?)");
  }
  kgpt::test::write_file(dir.file("ok.yaml"), "model:\n  n_layer: 3\n");
  const auto deck = kgpt::config::load_deck(dir.file("ok.yaml"), {});
  CHECK(deck.config.model.n_layer == 3);
  CHECK(deck.text == "model:\n  n_layer: 3\n");
  CHECK(deck.where("model.n_layer") == dir.file("ok.yaml") + ":2:12: model.n_layer");
}

TEST_CASE("each group's weight decay follows optim.weight_decay unless the deck sets it, the scalars' is 0", "[config]") {
  using namespace kgpt::config;
  const auto plain = parse_deck("optim:\n  weight_decay: 0.1\n", "wd.yaml", {});
  CHECK(plain.config.optim.matrix_weight_decay == 0.1);
  CHECK(plain.config.optim.embed_weight_decay == 0.1);
  CHECK(plain.config.optim.head_weight_decay == 0.1);
  CHECK(plain.config.optim.scalar_weight_decay == 0.0);
  // parameter-golf's records: Muon's matrices at 0.04, the embedding and the scalars' Adam at their own.
  const auto golf = parse_deck(
      "optim:\n  weight_decay: 0.1\n  matrix_weight_decay: 0.04\n  embed_weight_decay: 0.02\n"
      "  scalar_weight_decay: 0.01\n",
      "golf.yaml", {});
  CHECK(golf.config.optim.matrix_weight_decay == 0.04);
  CHECK(golf.config.optim.embed_weight_decay == 0.02);
  CHECK(golf.config.optim.scalar_weight_decay == 0.01);
  CHECK(golf.config.optim.head_weight_decay == 0.1);
  CHECK(error_of("optim:\n  scalar_weight_decay: -0.1\n").rfind("deck.yaml:2:24: optim.scalar_weight_decay:", 0) == 0);
  // A tied embedding has no head: its decay is noted as acting on nothing.
  const auto tied = parse_deck("optim:\n  head_weight_decay: 0.1\n", "tied.yaml", {});
  REQUIRE(tied.notes.size() == 1);
  CHECK(tied.notes[0] ==
        "tied.yaml:2:22: optim.head_weight_decay: optim.head_weight_decay = 0.1 has no effect: it acts with an untied "
        "embedding only, and model.tie_embeddings is true: there is no head");
}

TEST_CASE("choice keys become enums, and some defaults follow the family and the embedding's tying", "[config]") {
  using namespace kgpt::config;
  const auto golf = parse_deck("model:\n  family: golf\n", "golf.yaml", {});
  CHECK(golf.config.model.mlp_mult == 2);
  CHECK(golf.config.model.tied_embed_init_std == 0.005);
  CHECK(golf.config.optim.matrix_optimizer == "muon");
  CHECK(golf.config.optim.embed_lr == 0.05);
  const auto gpt2 = parse_deck("model:\n  family: gpt2\n  n_kv_head: 8\n", "gpt2.yaml", {});
  CHECK(gpt2.config.model.mlp_mult == 4);
  CHECK(gpt2.config.model.tied_embed_init_std == 0.02);
  CHECK(gpt2.config.optim.matrix_optimizer == "adamw");
  CHECK(gpt2.origin("optim.matrix_optimizer").kind == Origin::Kind::default_value);
  // gpt2 uses multi-head attention: its key/value heads follow n_head unless the deck sets them.
  const auto gpt2_two_heads = parse_deck("model:\n  family: gpt2\n  n_head: 2\n  d_model: 64\n", "two.yaml", {});
  CHECK(gpt2_two_heads.config.model.n_kv_head == 2);
  CHECK(parse_deck("model:\n  family: golf\n", "golf.yaml", {}).config.model.n_kv_head == 4);
  CHECK(error_of("model:\n  family: gpt2\n  n_head: 8\n  n_kv_head: 4\n") ==
        "deck.yaml:4:14: model.n_kv_head: n_kv_head = 4 must equal model.n_head = 8 (deck.yaml:3:11) for family gpt2, "
        "which uses multi-head attention");
  const auto untied = parse_deck("model:\n  tie_embeddings: false\n", "untied.yaml", {});
  CHECK(untied.config.optim.embed_lr == 0.6);  // parameter-golf's embed_lr for an untied embedding
  // A value given in the deck wins over the contextual default.
  const auto chosen = parse_deck("model:\n  family: gpt2\n  n_kv_head: 8\n  mlp_mult: 3\noptim:\n  matrix_optimizer: muon\n",
                                 "chosen.yaml", {});
  CHECK(chosen.config.model.mlp_mult == 3);
  CHECK(chosen.config.optim.matrix_optimizer == "muon");
  CHECK(error_of("optim:\n  matrix_optimizer: sgd\n") ==
        "deck.yaml:2:21: optim.matrix_optimizer: expected one of adamw|muon|normuon, got 'sgd'");
  // The resolved deck writes the values in force, and reads back to them.
  const auto again = parse_deck(render_resolved(gpt2), "resolved.yaml", {});
  CHECK(snapshot(again.config) == snapshot(gpt2.config));
  // A hand-built configuration gets the same defaults.
  Config by_hand;
  by_hand.model.family = "gpt2";
  by_hand.model.n_kv_head = 8;
  resolve_contextual_defaults(by_hand);
  CHECK(snapshot(by_hand) == snapshot(gpt2.config));
}

TEST_CASE("a key set where it acts on nothing is noted, not refused", "[config]") {
  const auto deck = parse_deck("model:\n  family: gpt2\n  n_kv_head: 8\n  qk_gain_init: 2\noptim:\n  head_lr: 0.01\n",
                               "idle.yaml", {});
  REQUIRE(deck.notes.size() == 2);
  CHECK(deck.notes[0] ==
        "idle.yaml:4:17: model.qk_gain_init: model.qk_gain_init = 2.0 has no effect: it acts with the golf family "
        "only, and model.family is gpt2");
  CHECK(deck.notes[1] ==
        "idle.yaml:6:12: optim.head_lr: optim.head_lr = 0.01 has no effect: it acts with an untied embedding only, "
        "and model.tie_embeddings is true: there is no head");
  const std::string resolved = kgpt::config::render_resolved(deck);
  CHECK(resolved.find("# idle.yaml:4:17; no effect: model.family is gpt2") != std::string::npos);
  // Defaults, and values equal to them (as in a resolved deck), are not noted.
  CHECK(parse_deck("model:\n  family: gpt2\n  n_kv_head: 8\n  qk_gain_init: 1.5\n", "same.yaml", {}).notes.empty());
  // A key every family but one reads is noted in that one only.
  CHECK(parse_deck("model:\n  family: gpt2\n  n_kv_head: 8\n  rope_base: 500\n", "rope.yaml", {}).notes.size() == 1);
  CHECK(parse_deck("model:\n  rope_base: 500\n", "rope.yaml", {}).notes.empty());
  // head_lr acts once the embedding is untied.
  CHECK(parse_deck("model:\n  tie_embeddings: false\noptim:\n  head_lr: 0.01\n", "untied.yaml", {}).notes.empty());
  // Only gpt2's MLP goes through GELU.
  const auto relu = parse_deck("model:\n  gelu_epilogue: false\n", "relu.yaml", {});
  REQUIRE(relu.notes.size() == 1);
  CHECK(relu.notes[0] ==
        "relu.yaml:2:18: model.gelu_epilogue: model.gelu_epilogue = false has no effect: it acts with the gpt2 family "
        "only, and model.family is golf");
  const auto gelu = parse_deck("model:\n  family: gpt2\n  n_kv_head: 8\n  gelu_epilogue: false\n", "gelu.yaml", {});
  CHECK(gelu.notes.empty());
  CHECK_FALSE(gelu.config.model.gelu_epilogue);
  CHECK(parse_deck("model:\n  family: gpt2\n  n_kv_head: 8\n", "gpt2.yaml", {}).config.model.gelu_epilogue);
}

TEST_CASE("a family's own keys are deck keys like any other: defaults, values, bounds, notes, resume", "[config]") {
  // Golf declares model.value_embed_layers and model.value_embed_dim (config/module_keys.hpp).
  const auto* layers = kgpt::config::find_key("model.value_embed_layers");
  const auto* dim = kgpt::config::find_key("model.value_embed_dim");
  REQUIRE(layers != nullptr);
  REQUIRE(dim != nullptr);
  CHECK(layers->kind == kgpt::config::ValueKind::string);
  CHECK(dim->type_name() == "integer");
  CHECK(layers->fixed_for_run);
  CHECK(layers->applies_doc == "the golf family");
  // After the model's own keys, before data's.
  const auto& schema = kgpt::config::deck_schema();
  auto named = [&schema](const std::string& key) {
    return std::find_if(schema.begin(), schema.end(), [&key](const auto& k) { return k.dotted() == key; });
  };
  const auto at = named("model.value_embed_dim"), last = named("model.attn_gate_width");  // golf's first and last
  REQUIRE(last + 1 != schema.end());
  CHECK((last + 1)->section == "data");
  CHECK(named("model.init_from") < at);
  CHECK(at < last);

  const Config defaults{};
  CHECK(kgpt::config::module_string(defaults.model.family_keys, "model.value_embed_layers").empty());
  CHECK(kgpt::config::module_integer(defaults.model.family_keys, "model.value_embed_dim") == 128);
  const auto deck = parse_deck("model:\n  value_embed_layers: \"7, 8\"\n  value_embed_dim: 64\n", "ve.yaml", {});
  CHECK(deck.notes.empty());
  CHECK(kgpt::config::module_string(deck.config.model.family_keys, "model.value_embed_layers") == "7, 8");
  CHECK(kgpt::config::module_integer(deck.config.model.family_keys, "model.value_embed_dim") == 64);
  CHECK(deck.where("model.value_embed_dim") == "ve.yaml:3:20: model.value_embed_dim");
  // The resolved deck writes them and reads back the same.
  const auto again = parse_deck(kgpt::config::render_resolved(deck), "resolved.yaml", {});
  CHECK(snapshot(again.config) == snapshot(deck.config));
  // Bounds and type, with the key's place.
  CHECK(error_of("model:\n  value_embed_dim: 0\n").find("deck.yaml:2:20: model.value_embed_dim") != std::string::npos);
  CHECK(error_of("model:\n  value_embed_dim: 0.5\n").find("model.value_embed_dim") != std::string::npos);
  // gpt2 does not read them.
  const auto idle = parse_deck("model:\n  family: gpt2\n  n_kv_head: 8\n  value_embed_dim: 64\n", "idle.yaml", {});
  REQUIRE(idle.notes.size() == 1);
  CHECK(idle.notes[0] ==
        "idle.yaml:4:20: model.value_embed_dim: model.value_embed_dim = 64 has no effect: it acts with the golf family "
        "only, and model.family is gpt2");
  // A key no module declares is a programming error, not a deck's.
  CHECK_THROWS_AS(kgpt::config::module_value(defaults.model.family_keys, "model.no_such_key"), kgpt::Error);
}

TEST_CASE("train.gemm_precision is read as train.precision", "[config]") {
  const auto deck = parse_deck("train:\n  gemm_precision: bf16\n", "old.yaml", {});
  CHECK(deck.config.model.precision == kgpt::config::Precision::bf16);
  CHECK(deck.where("train.precision") == "old.yaml:2:19: train.precision");
  CHECK(error_of("train:\n  precision: bf16\n  gemm_precision: fp32\n") ==
        "deck.yaml:3:3: train.gemm_precision: key appears twice in section 'train' (as train.precision, its new name)");
  DeckOptions options;
  options.overrides = {"train.gemm_precision=bf16"};
  CHECK(parse_deck("train:\n  seq_len: 1024\n", "flag.yaml", options).config.model.precision ==
        kgpt::config::Precision::bf16);
}
