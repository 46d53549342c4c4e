// The gpt2 family's entry in the registry (model/family.hpp).

#include <memory>

#include <nlohmann/json.hpp>

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
  family_entry::check_recurrence(deck, problems);
}

// transformers' GPT2LMHeadModel: the same blocks, names and GELU (tanh); its Conv1D layers keep
// their weights as (in, out).
HfForm hf_form(const config::ResolvedDeck& deck) {
  const config::ModelConfig& m = deck.config.model;
  HfForm form;
  form.architecture = "GPT2LMHeadModel";
  const nlohmann::json config = {
      {"architectures", {form.architecture}},
      {"model_type", "gpt2"},
      {"vocab_size", m.vocab_size},
      {"n_positions", deck.config.train.seq_len},
      {"n_ctx", deck.config.train.seq_len},
      {"n_embd", m.d_model},
      {"n_layer", m.n_layer},
      {"n_head", m.n_head},
      {"n_inner", m.d_model * m.mlp_mult},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", m.tie_embeddings},
      {"use_cache", true},
  };
  form.config_json = config.dump(2);
  for (int i = 0; i < m.n_layer; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    for (const char* name : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"}) {
      form.transposed.push_back(p + name);
    }
  }
  form.optional_prefix = "transformer.";  // GPT-2's own files name the base model's tensors without it
  form.buffer_suffixes = {".attn.bias", ".attn.masked_bias"};  // the causal mask of older files
  form.position_tables = {"transformer.wpe.weight"};
  return form;
}

}  // namespace

const Family& gpt2_family() {
  static const Family f = [] {
    Family made;
    made.name = "gpt2";
    made.summary = "nanoGPT / GPT-2: learned positions, LayerNorm, GELU MLP, multi-head attention, biases, tied head, "
                   "AdamW";
    made.defaults = FamilyDefaults{4, 0.02, 30.0, true, "adamw", 0};
    // Its MLP is up into GELU, then down (ops/linear.hpp): model.gelu_epilogue, and kgpt check
    // --device times GELU in those products against GELU apart (probes/gelu.hpp).
    made.reads = {"model.gelu_epilogue", family_entry::kRecurrenceKeys[0], family_entry::kRecurrenceKeys[1]};
    made.rules = std::string("`n_kv_head = n_head` (multi-head attention); ") + family_entry::kRecurrenceRule;
    made.check = check;
    made.layout = layout;
    made.make_float = family_entry::make_float<Gpt2Model>;
    made.make_double = family_entry::make_double<Gpt2Model>;
    made.activation_bytes = activation_bytes;
    made.flops_per_token = flops_per_token;
    made.hf_form = hf_form;
    return made;
  }();
  return f;
}

}  // namespace kgpt::model
