// The llama family's entry in the registry (model/family.hpp).

#include <memory>

#include <nlohmann/json.hpp>

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

void check(const config::ResolvedDeck& deck, std::vector<std::string>& problems) {
  family_entry::check_rope_head_dim(deck, problems);
  family_entry::check_recurrence(deck, problems);
}

// transformers' LlamaForCausalLM: the same names, shapes and kernels (RMSNorm eps 1e-5, rotate_half
// RoPE at model.rope_base, SwiGLU, no biases).
HfForm hf_form(const config::ResolvedDeck& deck) {
  const config::ModelConfig& m = deck.config.model;
  HfForm form;
  form.architecture = "LlamaForCausalLM";
  const nlohmann::json config = {
      {"architectures", {form.architecture}},
      {"model_type", "llama"},
      {"vocab_size", m.vocab_size},
      {"hidden_size", m.d_model},
      {"intermediate_size", m.d_model * m.mlp_mult},
      {"num_hidden_layers", m.n_layer},
      {"num_attention_heads", m.n_head},
      {"num_key_value_heads", m.n_kv_head},
      {"head_dim", head_shape(m).dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", deck.config.train.seq_len},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", m.rope_base},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"tie_word_embeddings", m.tie_embeddings},
      {"use_cache", true},
  };
  form.config_json = config.dump(2);
  form.buffer_suffixes = {".rotary_emb.inv_freq"};  // older files keep RoPE's frequencies
  return form;
}

}  // namespace

const Family& llama_family() {
  static const Family f = [] {
    Family made;
    made.name = "llama";
    made.summary = "Llama 2/3 as Hugging Face's LlamaForCausalLM: RMSNorm with weights, RoPE, GQA, SwiGLU MLP, no "
                   "biases, untied head, AdamW";
    made.defaults = FamilyDefaults{3, 0.02, 0.0, false, "adamw"};
    made.reads = {"model.rope_base", family_entry::kRecurrenceKeys[0], family_entry::kRecurrenceKeys[1]};
    made.rules = std::string("the head dimension is even (RoPE); ") + family_entry::kRecurrenceRule;
    made.check = check;
    made.layout = layout;
    made.make_float = family_entry::make_float<LlamaModel>;
    made.make_double = family_entry::make_double<LlamaModel>;
    made.activation_bytes = activation_bytes;
    made.flops_per_token = flops_per_token;
    made.hf_form = hf_form;
    return made;
  }();
  return f;
}

}  // namespace kgpt::model
