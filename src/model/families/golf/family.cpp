// The golf family's entry in the registry (model/family.hpp).

#include <memory>
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "model/family.hpp"
#include "model/family_entry.hpp"
#include "model/families/golf/golf.hpp"

namespace kgpt::model {

namespace {

ParameterLayout layout(const config::ModelConfig& m, int) {
  return layout_of<GolfTensors>([&m](auto& tensors, auto& visit) { declare_golf(m, tensors, visit); });
}

std::size_t activation_bytes(const config::ModelConfig& m, int max_batch, int max_seq) {
  return family_entry::activation_bytes<GolfActivations>(
      m, max_batch, max_seq, [&m](auto& acts, auto& counter, std::size_t tokens) {
        declare_golf_activations(m, tokens, acts, counter);
      });
}

// BigramHash's table is read, not multiplied: its rows are no product's FLOPs (its projection's are).
double flops_per_token(const config::ModelConfig& m, int seq) {
  return standard_flops_per_token(m, layout(m, seq), seq, {"bigram.embed.weight"});
}

void check(const config::ResolvedDeck& deck, std::vector<std::string>& problems) {
  family_entry::check_rope_head_dim(deck, problems);
  const config::ModelConfig& m = deck.config.model;
  if (m.parallel_residual_start >= m.n_layer) {
    problems.push_back(deck.where("model.parallel_residual_start") + ": " + std::to_string(m.parallel_residual_start) +
                       " names no block: the blocks are 0 to " + std::to_string(m.n_layer - 1) + " (model.n_layer = " +
                       std::to_string(m.n_layer) + " (" + deck.origin("model.n_layer").describe() + ")); -1 runs none "
                       "in parallel");
  }
  family_entry::check_recurrence(deck, problems);
  if (m.bigram_buckets == 1) {
    problems.push_back(deck.where("model.bigram_buckets") +
                       ": 1 bucket leaves the hash no rows (it reads bucket - 1 rows and the last one for a sequence's "
                       "start); use 0 for none or at least 2");
  }
}

}  // namespace

const Family& golf_family() {
  static const Family f = [] {
    Family made;
    made.name = "golf";
    made.summary = "parameter-golf's baseline: RMSNorm, RoPE with q/k norms and gains, GQA, relu^2 MLP, U-Net skips, "
                   "residual mixes, softcapped tied head, Muon";
    made.defaults = FamilyDefaults{2, 0.005, 30.0, true, "muon"};
    made.reads = {"model.rope_base",   "model.qk_gain_init", "model.smear_gate",     "model.parallel_residual_start",
                  family_entry::kRecurrenceKeys[0], family_entry::kRecurrenceKeys[1], "model.bigram_buckets", "model.bigram_dim"};
    made.rules = std::string("the head dimension is even (RoPE); model.parallel_residual_start is below model.n_layer; ") +
                 family_entry::kRecurrenceRule + "; model.bigram_buckets is not 1";
    made.check = check;
    made.layout = layout;
    made.make_float = family_entry::make_float<GolfModel>;
    made.make_double = family_entry::make_double<GolfModel>;
    made.activation_bytes = activation_bytes;
    made.flops_per_token = flops_per_token;
    return made;
  }();
  return f;
}

}  // namespace kgpt::model
