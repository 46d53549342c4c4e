#pragma once
// What the deck asks of an optimizer rule: its name (optim.matrix_optimizer's spelling), its
// summary, the keys only it reads and its own rules between keys. The rules themselves live in
// optim/rules/ (a rule's updates, state and memory: optim/rules/registry.hpp, whose RuleEntry
// extends these); the optimizer's rule registry (optim/rules/registry.cpp) defines
// optimizer_rules() below, so the schema and the deck checks learn every rule without including an
// optimizer header.

#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "config/module_keys.hpp"

namespace kgpt::config {

struct ResolvedDeck;

struct OptimizerRules {
  std::string name;     // optim.matrix_optimizer
  std::string summary;  // a few words for the deck reference
  // Deck keys that act only where this rule updates the matrices ("optim.muon_momentum").
  std::vector<std::string> reads;
  // The keys it declares itself (config/module_keys.hpp), in the optim section; it reads them too.
  std::vector<ModuleKey> keys;
  // Its own rules between deck keys, in words for the deck reference; `check` enforces them.
  std::string rules;
  // One message per problem, each naming its keys (deck.where(key)), appended to `problems`.
  void (*check)(const ResolvedDeck& deck, std::vector<std::string>& problems) = nullptr;

  bool reads_key(std::string_view dotted) const;
};

// Every registered rule, in registration order (defined by the optimizer's rule registry).
const std::vector<const OptimizerRules*>& optimizer_rules();
// The rule named `name`, or nullptr.
const OptimizerRules* find_optimizer_rules(const std::string& name);
// "adamw, muon"
std::string optimizer_rule_names();

}  // namespace kgpt::config
