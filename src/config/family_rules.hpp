#pragma once
// What the deck asks of a model family: its name and summary, the defaults it gives the deck, the
// keys it reads and its own rules between keys. The families themselves live in model/ (a family's
// models, layout and FLOPs: model/family.hpp, whose Family extends these rules); the model's
// family registry (model/families/registry.cpp) defines family_rules() below, so the schema and
// the deck checks learn every family without including a model header.

#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "config/module_keys.hpp"

namespace kgpt::config {

struct ResolvedDeck;

// The deck defaults that depend on the family (the schema's contextual defaults).
struct FamilyDefaults {
  int mlp_mult = 2;
  double tied_embed_init_std = 0.005;
  double logit_softcap = 30.0;
  bool tie_embeddings = true;
  std::string matrix_optimizer = "muon";  // a registered optimizer rule
  int n_kv_head = 4;  // 0: as many as model.n_head (multi-head attention)
};

struct FamilyRules {
  std::string name;     // model.family
  std::string summary;  // one line for the deck reference
  FamilyDefaults defaults;
  // Deck keys that act only in the families that read them ("model.rope_base"): those this one reads.
  std::vector<std::string> reads;
  // The keys it declares itself (config/module_keys.hpp), in its section (model.*); it reads them too.
  std::vector<ModuleKey> keys;
  // Its own rules between deck keys, in words for the deck reference; `check` enforces them.
  std::string rules;
  // The family's own rules between deck keys: one message per problem, each naming its keys
  // (deck.where(key)), appended to `problems`.
  void (*check)(const ResolvedDeck& deck, std::vector<std::string>& problems) = nullptr;

  bool reads_key(std::string_view dotted) const;
};

// Every registered family's rules, in registration order (defined by the model's family registry).
const std::vector<const FamilyRules*>& family_rules();
// The rules of the family named `name`, or nullptr.
const FamilyRules* find_family_rules(const std::string& name);
// Whether the family of `model` reads the key: a key set for a family that does not read it is a
// note in the deck, and the model must act as if it were not set. No allocation: the recompute plan
// asks it for every layer of every pass.
inline bool family_reads(const ModelConfig& model, std::string_view dotted) {
  const FamilyRules* f = find_family_rules(model.family);
  return f != nullptr && f->reads_key(dotted);
}
// The same; throws Error naming the registered families when there is none.
const FamilyRules& family_rules(const std::string& name);
// "golf, gpt2, llama"
std::string family_names();

}  // namespace kgpt::config
