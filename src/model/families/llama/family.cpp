// The llama family's entry in the registry (model/family.hpp).

#include <memory>

#include "config/deck.hpp"
#include "model/family.hpp"
#include "model/family_entry.hpp"
#include "model/families/llama/llama.hpp"

namespace kgpt::model {

namespace {

ParameterLayout layout(const config::ModelConfig& m, int) {
  return layout_of<LlamaTensors>([&m](auto& tensors, auto& visit) { declare_llama(m, tensors, visit); });
}

std::size_t activation_bytes(const config::ModelConfig& m, int max_batch, int max_seq) {
  return family_entry::activation_bytes<LlamaActivations>(
      m, max_batch, max_seq, [&m](auto& acts, auto& counter, std::size_t tokens) {
        declare_llama_activations(m, tokens, acts, counter);
      });
}

double flops_per_token(const config::ModelConfig& m, int seq) { return standard_flops_per_token(m, layout(m, seq), seq); }

}  // namespace

const Family& llama_family() {
  static const Family f = [] {
    Family made;
    made.name = "llama";
    made.summary = "Llama 2/3 as Hugging Face's LlamaForCausalLM: RMSNorm with weights, RoPE, GQA, SwiGLU MLP, no "
                   "biases, untied head, AdamW";
    made.defaults = FamilyDefaults{3, 0.02, 0.0, false, config::MatrixOptimizer::adamw};
    made.reads = {"model.rope_base"};
    made.rules = "the head dimension is even (RoPE)";
    made.check = family_entry::check_rope_head_dim;
    made.layout = layout;
    made.make_float = family_entry::make_float<LlamaModel>;
    made.make_double = family_entry::make_double<LlamaModel>;
    made.activation_bytes = activation_bytes;
    made.flops_per_token = flops_per_token;
    return made;
  }();
  return f;
}

}  // namespace kgpt::model
