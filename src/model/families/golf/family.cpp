// The golf family's entry in the registry (model/family.hpp).

#include <memory>

#include "config/deck.hpp"
#include "model/family.hpp"
#include "model/families/golf/golf.hpp"

namespace kgpt::model {

namespace {

ParameterLayout layout(const config::ModelConfig& m, int) {
  return layout_of<GolfTensors>([&m](auto& tensors, auto& visit) { declare_golf(m, tensors, visit); });
}

std::unique_ptr<LanguageModel<float>> make_float(const config::ModelConfig& m, int max_batch, int max_seq) {
  if (m.precision == config::Precision::bf16) return std::make_unique<GolfModel<float, bf16>>(m, max_batch, max_seq);
  return std::make_unique<GolfModel<float>>(m, max_batch, max_seq);
}

std::unique_ptr<LanguageModel<double>> make_double(const config::ModelConfig& m, int max_batch, int max_seq) {
  return std::make_unique<GolfModel<double>>(m, max_batch, max_seq);
}

std::size_t activation_bytes(const config::ModelConfig& m, int max_batch, int max_seq) {
  const std::size_t tokens = static_cast<std::size_t>(max_batch) * max_seq;
  ActivationCounter counter(tokens);
  if (m.precision == config::Precision::bf16) {
    GolfActivations<float, bf16> scratch;
    declare_golf_activations(m, max_seq, tokens, scratch, counter);
  } else {
    GolfActivations<float, float> scratch;
    declare_golf_activations(m, max_seq, tokens, scratch, counter);
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

const Family& golf_family() {
  static const Family f = [] {
    Family made;
    made.name = "golf";
    made.summary = "parameter-golf's baseline: RMSNorm, RoPE with q/k norms and gains, GQA, relu^2 MLP, U-Net skips, "
                   "residual mixes, softcapped tied head, Muon";
    made.defaults = FamilyDefaults{2, 0.005, 30.0, true, config::MatrixOptimizer::muon};
    made.reads = {"model.rope_base", "model.qk_gain_init"};
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
