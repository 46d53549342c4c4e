#include "train/step_estimate.hpp"

#include "core/text.hpp"
#include "model/family.hpp"
#include "model/parameters.hpp"

namespace kgpt::train {

namespace {

// golf's baseline deck (inputs/golf_8xh100.yaml), as its measured figure ran it.
config::ModelConfig baseline_model() {
  config::ModelConfig m;
  m.family = "golf";
  m.vocab_size = 1024;
  m.n_layer = 9;
  m.d_model = 512;
  m.n_head = 8;
  m.n_kv_head = 4;
  m.mlp_mult = 2;
  return m;
}

}  // namespace

StepEstimate estimate_h100_step(const config::ResolvedDeck& deck) {
  const config::Config& c = deck.config;
  StepEstimate e;
  e.rank_tokens = static_cast<double>(c.train.global_batch_tokens) / deck.plan.world_size;
  e.flops_per_token = model::family(c.model.family).flops_per_token(c.model, c.train.seq_len);
  e.baseline_flops_per_token = model::family("golf").flops_per_token(baseline_model(), 1024);
  const double baseline_rate = e.baseline_flops_per_token * kBaselineRankTokens / (kBaselineRankMs * 1e-3);
  e.compute_ms = e.flops_per_token * e.rank_tokens / baseline_rate * 1e3;
  if (deck.plan.world_size > 1) {
    // A ring all-reduce moves 2 (W - 1) / W of the fp32 gradients over each link.
    const double w = deck.plan.world_size;
    const double bytes = 4.0 * static_cast<double>(model::family(c.model.family).layout(c.model, c.train.seq_len).buffer_size());
    e.allreduce_ms = 2.0 * (w - 1) / w * bytes / kNvlinkBusBytesPerS * 1e3;
  }
  e.step_ms = e.compute_ms + e.allreduce_ms;
  e.tokens_per_s_per_gpu = e.rank_tokens / (e.step_ms * 1e-3);
  return e;
}

std::string describe(const StepEstimate& e, int world_size) {
  return "estimated step on " + std::to_string(world_size) + " x H100: " + text::fixed(e.step_ms, 1) + " ms (" +
         text::fixed(e.compute_ms, 1) + " ms for " + text::with_thousands(static_cast<unsigned long long>(e.rank_tokens)) +
         " tokens a rank at " + text::fixed(e.flops_per_token / 1e6, 1) + " MFLOP a token, scaled from golf's baseline at " +
         text::fixed(e.baseline_flops_per_token / 1e6, 1) + " MFLOP a token measured at " + text::fixed(kBaselineRankMs, 1) +
         " ms for 65,536 tokens a rank; " + text::fixed(e.allreduce_ms, 2) +
         " ms for the gradients' all-reduce if none of it overlapped), " +
         text::with_thousands(static_cast<unsigned long long>(e.tokens_per_s_per_gpu)) + " tokens/s per GPU";
}

}  // namespace kgpt::train
