// The llama family's entry in the registry (model/family.hpp).

#include <memory>

#include "config/deck.hpp"
#include "model/family.hpp"
#include "model/families/llama/llama.hpp"

namespace kgpt::model {

namespace {

ParameterLayout layout(const config::ModelConfig& m, int) {
  return layout_of<LlamaTensors>([&m](auto& tensors, auto& visit) { declare_llama(m, tensors, visit); });
}

std::unique_ptr<LanguageModel<float>> make_float(const config::ModelConfig& m, int max_batch, int max_seq) {
  if (m.precision == config::Precision::bf16) return std::make_unique<LlamaModel<float, bf16>>(m, max_batch, max_seq);
  return std::make_unique<LlamaModel<float>>(m, max_batch, max_seq);
}

std::unique_ptr<LanguageModel<double>> make_double(const config::ModelConfig& m, int max_batch, int max_seq) {
  return std::make_unique<LlamaModel<double>>(m, max_batch, max_seq);
}

std::size_t activation_bytes(const config::ModelConfig& m, int max_batch, int max_seq) {
  const std::size_t tokens = static_cast<std::size_t>(max_batch) * max_seq;
  ActivationCounter counter(tokens);
  if (m.precision == config::Precision::bf16) {
    LlamaActivations<float, bf16> scratch;
    declare_llama_activations(m, tokens, scratch, counter);
  } else {
    LlamaActivations<float, float> scratch;
    declare_llama_activations(m, tokens, scratch, counter);
  }
  return counter.bytes();
}

double flops_per_token(const config::ModelConfig& m, int seq) { return standard_flops_per_token(m, layout(m, seq), seq); }

// RoPE rotates pairs of a head's features.
void check(const config::ResolvedDeck& deck, std::vector<std::string>& problems) {
  const config::ModelConfig& m = deck.config.model;
  if (m.d_model % m.n_head == 0 && (m.d_model / m.n_head) % 2 != 0) {
    problems.push_back(deck.where("model.d_model") + ": the head dimension d_model / n_head = " +
                       std::to_string(m.d_model / m.n_head) + " must be even for RoPE (model.n_head = " +
                       std::to_string(m.n_head) + " (" + deck.origin("model.n_head").describe() + "))");
  }
}

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
    made.check = check;
    made.layout = layout;
    made.make_float = make_float;
    made.make_double = make_double;
    made.activation_bytes = activation_bytes;
    made.flops_per_token = flops_per_token;
    return made;
  }();
  return f;
}

}  // namespace kgpt::model
