// The golf family's entry in the registry (model/family.hpp).

#include <memory>
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "core/error.hpp"
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

// BigramHash's and the value embeddings' tables are read, not multiplied: their rows are no
// product's FLOPs (their projections' are).
double flops_per_token(const config::ModelConfig& m, int seq) {
  return standard_flops_per_token(m, layout(m, seq), seq, {"bigram.embed.weight", "ve_shared.embed.weight"});
}

// model.value_embed_layers names layers that run, each once; the table is no wider than the model
// (the embedding gradient's sorted rows are sized by the widest table it sorts: model/model_base.hpp).
void check_value_embeds(const config::ResolvedDeck& deck, std::vector<std::string>& problems) {
  const config::ModelConfig& m = deck.config.model;
  std::vector<int> listed;
  try {
    listed = golf::value_embed_layers(m);
  } catch (const InputError& e) {
    problems.push_back(deck.where(golf::kValueEmbedLayersKey) + ": " +
                       std::string(e.what()).substr(std::string(golf::kValueEmbedLayersKey).size() + 2));
    return;
  }
  const int layers = run_layers(m);
  for (std::size_t j = 0; j < listed.size(); ++j) {
    if (listed[j] >= layers) {
      problems.push_back(deck.where(golf::kValueEmbedLayersKey) + ": layer " + std::to_string(listed[j]) +
                         " is not run: the layers are 0 to " + std::to_string(layers - 1) +
                         " (model.n_layer plus model.recur_count where model.recur_start is set)");
    }
    for (std::size_t i = 0; i < j; ++i) {
      if (listed[i] == listed[j]) {
        problems.push_back(deck.where(golf::kValueEmbedLayersKey) + ": layer " + std::to_string(listed[j]) +
                           " is listed twice");
      }
    }
  }
  if (!listed.empty() && golf::value_embed_dim(m) > m.d_model) {
    problems.push_back(deck.where(golf::kValueEmbedDimKey) + ": " + std::to_string(golf::value_embed_dim(m)) +
                       " is wider than model.d_model = " + std::to_string(m.d_model) +
                       "; the value embeddings' table is at most as wide as the model");
  }
}

// Partial RoPE rotates an even number of a head's dimensions, at most all of them; XSA's layers run
// and its KV groups are at most golf::kXsaMaxGroup heads.
void check_attention_options(const config::ResolvedDeck& deck, std::vector<std::string>& problems) {
  const config::ModelConfig& m = deck.config.model;
  const int head_dim = m.n_head > 0 ? m.d_model / m.n_head : 0;
  const int rope_dims = golf::rope_dims(m);
  if (rope_dims % 2 != 0 || rope_dims > head_dim) {
    problems.push_back(deck.where(golf::kRopeDimsKey) + ": " + std::to_string(rope_dims) +
                       " dimensions cannot rotate: partial RoPE rotates an even number of them, at most the head "
                       "dimension d_model / n_head = " + std::to_string(head_dim) + "; 0 rotates all");
  }
  const long long xsa = config::module_integer(m.family_keys, golf::kXsaLastKey);
  const int layers = run_layers(m);
  if (xsa > layers) {
    problems.push_back(deck.where(golf::kXsaLastKey) + ": " + std::to_string(xsa) + " layers, but " +
                       std::to_string(layers) + " run (model.n_layer plus model.recur_count where model.recur_start "
                       "is set); at most that many");
  }
  const int gate_width = golf::attn_gate_width(m);
  if (gate_width > head_dim) {
    problems.push_back(deck.where(golf::kAttnGateWidthKey) + ": " + std::to_string(gate_width) +
                       " features, more than the head dimension d_model / n_head = " + std::to_string(head_dim) +
                       " (the records read 12 of 512 for 64-wide heads)");
  }
  if (xsa > 0 && m.n_kv_head > 0 && m.n_head / m.n_kv_head > golf::kXsaMaxGroup) {
    problems.push_back(deck.where(golf::kXsaLastKey) + ": XSA serves at most " + std::to_string(golf::kXsaMaxGroup) +
                       " query heads a key/value head; model.n_head / model.n_kv_head = " +
                       std::to_string(m.n_head / m.n_kv_head));
  }
}

void check(const config::ResolvedDeck& deck, std::vector<std::string>& problems) {
  family_entry::check_rope_head_dim(deck, problems);
  check_attention_options(deck, problems);
  const config::ModelConfig& m = deck.config.model;
  if (m.parallel_residual_start >= m.n_layer) {
    problems.push_back(deck.where("model.parallel_residual_start") + ": " + std::to_string(m.parallel_residual_start) +
                       " names no block: the blocks are 0 to " + std::to_string(m.n_layer - 1) + " (model.n_layer = " +
                       std::to_string(m.n_layer) + " (" + deck.origin("model.n_layer").describe() + ")); -1 runs none "
                       "in parallel");
  }
  family_entry::check_recurrence(deck, problems);
  check_value_embeds(deck, problems);
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
    made.keys = {
        {golf::kValueEmbedLayersKey, config::ValueKind::string, config::Bounds{}, config::Value(std::string()),
         "Value embeddings, as parameter-golf's SP1024 record of 2026-03-31 uses them (\"9,10\" of its 11 "
         "layers): the layers, as run and counted from 0, whose attention adds a shared embedding of each "
         "position's token to its values, v += g_j * s * (table[token] W^T), before the attention reads them. "
         "The table (ve_shared.embed.weight, V rows of model.value_embed_dim, from N(0, 0.01), trained with "
         "optim.embed_lr) is projected to the key/value width (ve_shared.proj.weight, from zero, a matrix) "
         "where it is narrower, scaled by a learned scalar from 0.1 (ve_shared.scale), and by one more per "
         "listed layer from 1 (ve_layer_scales.j). Comma-separated; \"\": none. Part of the model: eval and "
         "sample use the checkpoint deck's; --resume refuses another value."},
        {golf::kValueEmbedDimKey, config::ValueKind::integer, config::Bounds{1, 65536, true, true, false, false},
         config::Value(128LL), "The width of the value embeddings' table rows (the record: 128); at most d_model."},
        {golf::kRopeDimsKey, config::ValueKind::integer, config::Bounds{0, 65536, true, true, false, false},
         config::Value(0LL),
         "Partial RoPE, as parameter-golf's records from 2026-03-21 use it (16 of 64): the dimensions of each q "
         "and k head that rotate, the first ones, as two halves with angles t * rope_base^(-2i/rope_dims); the "
         "rest pass through unrotated. Even, at most the head dimension; 0 rotates all. Part of the model: eval "
         "and sample use the checkpoint deck's; --resume refuses another value."},
        {golf::kLnScaleKey, config::ValueKind::boolean, config::Bounds{}, config::Value(false),
         "LN scale, as parameter-golf's records from 2026-03-21 use it: each block's two norms (before the "
         "attention and before the MLP) scaled by 1/sqrt(l + 1), l the layer as run, counted from 0. Part of "
         "the model."},
        {golf::kXsaLastKey, config::ValueKind::integer, config::Bounds{0, 65536, true, true, false, false},
         config::Value(0LL),
         "Exclusive self-attention (XSA) on the last N layers as run, as parameter-golf's records from "
         "2026-03-20 use it (the SP1024 record: all 11): each head's attention output loses its projection on "
         "the normalized value of its own token (its key/value head's v), y - (y . v/|v|) v/|v|, before the "
         "output projection. 0: none. Part of the model."},
        {golf::kAttnGateWidthKey, config::ValueKind::integer, config::Bounds{0, 65536, true, true, false, false},
         config::Value(0LL),
         "The attention output gate of parameter-golf's record of 2026-04-16 (GATE_ATTN_OUT, GATE_WIDTH 12): "
         "each head's output (after XSA) times 2 sigmoid(z), z the first attn_gate_width features of the "
         "attention's input times the head's row of blocks.i.attn.attn_gate_proj.weight (n_head x "
         "attn_gate_width, from zero: every gate starts at 1; a control, trained with optim.scalar_lr). At most "
         "the head dimension; 0: no gate. Part of the model."},
    };
    made.rules = std::string("the head dimension is even (RoPE); model.parallel_residual_start is below model.n_layer; ") +
                 family_entry::kRecurrenceRule + "; model.bigram_buckets is not 1; model.value_embed_layers lists "
                 "layers that run, each once; model.value_embed_dim is at most d_model; model.rope_dims is even and "
                 "at most the head dimension; model.xsa_last_n is at most the layers run, with at most 32 query "
                 "heads a key/value head; model.attn_gate_width is at most the head dimension";
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
