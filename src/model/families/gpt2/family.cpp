// The gpt2 family's entry in the registry (model/family.hpp).

#include <memory>

#include "config/deck.hpp"
#include "model/family.hpp"
#include "model/family_entry.hpp"
#include "model/families/gpt2/gpt2.hpp"

namespace kgpt::model {

namespace {

ParameterLayout layout(const config::ModelConfig& m, int max_seq) {
  return layout_of<Gpt2Tensors>([&](auto& tensors, auto& visit) { declare_gpt2(m, max_seq, tensors, visit); });
}

std::size_t activation_bytes(const config::ModelConfig& m, int max_batch, int max_seq) {
  return family_entry::activation_bytes<Gpt2Activations>(
      m, max_batch, max_seq, [&m](auto& acts, auto& counter, std::size_t tokens) {
        declare_gpt2_activations(m, tokens, acts, counter);
      });
}

double flops_per_token(const config::ModelConfig& m, int seq) {
  return standard_flops_per_token(m, layout(m, seq), seq, {"transformer.wpe.weight"});
}

// Multi-head attention: as many key/value heads as query heads.
void check(const config::ResolvedDeck& deck, std::vector<std::string>& problems) {
  const config::ModelConfig& m = deck.config.model;
  if (m.n_kv_head != m.n_head) {
    problems.push_back(deck.where("model.n_kv_head") + ": n_kv_head = " + std::to_string(m.n_kv_head) +
                       " must equal model.n_head = " + std::to_string(m.n_head) + " (" +
                       deck.origin("model.n_head").describe() + ") for family gpt2, which uses multi-head attention");
  }
}

}  // namespace

const Family& gpt2_family() {
  static const Family f = [] {
    Family made;
    made.name = "gpt2";
    made.summary = "nanoGPT / GPT-2: learned positions, LayerNorm, GELU MLP, multi-head attention, biases, tied head, "
                   "AdamW";
    made.defaults = FamilyDefaults{4, 0.02, 30.0, true, config::MatrixOptimizer::adamw};
    made.reads = {};
    made.rules = "`n_kv_head = n_head` (multi-head attention)";
    made.check = check;
    made.layout = layout;
    made.make_float = family_entry::make_float<Gpt2Model>;
    made.make_double = family_entry::make_double<Gpt2Model>;
    made.activation_bytes = activation_bytes;
    made.flops_per_token = flops_per_token;
    return made;
  }();
  return f;
}

}  // namespace kgpt::model
