// kgpt check's estimate of a deck's step on H100s (train/step_estimate.hpp), from its definition, and
// the record deck's artifact plan.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/deck.hpp"
#include "inference/from_checkpoint.hpp"
#include "io/artifact.hpp"
#include "model/block_sequence.hpp"
#include "model/family.hpp"
#include "model/parameters.hpp"
#include "train/step_estimate.hpp"

using namespace kgpt;

namespace {

config::ResolvedDeck deck_at(int world_size, const std::vector<std::string>& overrides = {}) {
  config::DeckOptions options;
  options.world_size = world_size;
  options.overrides = overrides;
  return config::load_deck(std::string(KGPT_SOURCE_DIR) + "/inputs/golf_8xh100.yaml", options);
}

}  // namespace

TEST_CASE("the step estimate gives the measured baseline back and scales with FLOPs and tokens", "[train][estimate]") {
  // The baseline deck as measured: 65,536 tokens a rank at world size 8.
  const train::StepEstimate at8 = train::estimate_h100_step(deck_at(8));
  CHECK(at8.rank_tokens == 65536);
  CHECK(at8.flops_per_token == Approx(at8.baseline_flops_per_token).epsilon(1e-12));
  CHECK(at8.compute_ms == Approx(train::kBaselineRankMs).epsilon(1e-12));
  // 17.1 M parameters in fp32 over 7/4 of the bus: about 0.34 ms if none of it hid behind the backward.
  const double bytes = 4.0 * static_cast<double>(model::family("golf").layout(deck_at(8).config.model, 1024).buffer_size());
  CHECK(at8.allreduce_ms == Approx(2.0 * 7 / 8 * bytes / train::kNvlinkBusBytesPerS * 1e3).epsilon(1e-12));
  CHECK(at8.step_ms == Approx(at8.compute_ms + at8.allreduce_ms).epsilon(1e-12));
  // One rank runs the whole batch: 8 times the compute, nothing to average.
  const train::StepEstimate at1 = train::estimate_h100_step(deck_at(1));
  CHECK(at1.compute_ms == Approx(8 * train::kBaselineRankMs).epsilon(1e-12));
  CHECK(at1.allreduce_ms == 0);
  // Two blocks run twice: the FLOPs of two more layers (their parameters and their attention).
  const train::StepEstimate recurring = train::estimate_h100_step(deck_at(8, {"model.recur_start=4", "model.recur_count=2"}));
  CHECK(recurring.flops_per_token > at8.flops_per_token);
  CHECK(recurring.compute_ms == Approx(train::kBaselineRankMs * recurring.flops_per_token / at8.flops_per_token).epsilon(1e-12));
  const std::string line = train::describe(at8, 8);
  CHECK(line.find("8 x H100") != std::string::npos);
  CHECK(line.find("34.3 ms") != std::string::npos);
}

TEST_CASE("BigramHash counts its projection's FLOPs and not its table's", "[train][estimate]") {
  config::ModelConfig m = deck_at(1).config.model;
  const model::Family& golf = model::family("golf");
  const double plain = golf.flops_per_token(m, 1024);
  m.bigram_buckets = 2816;
  m.bigram_dim = 112;
  // The table is read; the projection (512 x 112) and the scale are parameters of products.
  CHECK(golf.flops_per_token(m, 1024) == Approx(plain + 6.0 * (512 * 112 + 1)).epsilon(1e-12));
}

TEST_CASE("depth recurrence counts a repeated block's FLOPs once per layer that runs it", "[train][estimate]") {
  config::ModelConfig m = deck_at(1).config.model;
  const model::Family& golf = model::family("golf");
  const double plain = golf.flops_per_token(m, 1024);
  m.recur_start = 4;
  m.recur_count = 2;
  const model::ParameterLayout layout = golf.layout(m, 1024);
  std::size_t repeated = 0;
  for (const auto& e : layout.entries()) {
    if (e.spec.block == 4 || e.spec.block == 5) repeated += e.size;
  }
  // The repeated blocks' parameters again, and two more layers of attention (12 H D T each); the
  // U-Net of 11 layers has one skip weight more than that of 9.
  const double head_dim = 512.0 / 8;
  const double skip = 512;
  CHECK(golf.flops_per_token(m, 1024) ==
        Approx(plain + 6.0 * (static_cast<double>(repeated) + skip) + 2 * 12.0 * 8 * head_dim * 1024).epsilon(1e-12));
}

TEST_CASE("the record deck's artifact fits parameter-golf's limit whatever the weights", "[train][decks]") {
  config::DeckOptions options;
  options.world_size = 8;
  const config::ResolvedDeck deck =
      config::load_deck(std::string(KGPT_SOURCE_DIR) + "/inputs/golf_record_sp1024.yaml", options);
  const config::ModelConfig& m = deck.config.model;
  // The record's architecture: 11 blocks with 4 and 5 run twice, a 3x MLP, BigramHash 2816 x 112,
  // SmearGate, parallel residuals from block 7.
  CHECK(model::run_layers(m) == 13);
  CHECK(m.mlp_mult == 3);
  CHECK(m.bigram_buckets == 2816);
  CHECK(m.smear_gate);
  CHECK(m.parallel_residual_start == 7);
  CHECK(deck.plan.local_sequences == 48);
  const inference::ArtifactPlan plan = inference::plan_artifact(deck);
  CHECK(plan.largest_bytes <= io::kArtifactLimitBytes);
  // Its step at the baseline's FLOP rate: the FLOPs of 13 layers of a 3x MLP at seq_len 2048.
  const train::StepEstimate estimate = train::estimate_h100_step(deck);
  CHECK(estimate.rank_tokens == 98304);
  CHECK(estimate.flops_per_token > 2 * estimate.baseline_flops_per_token);
}
