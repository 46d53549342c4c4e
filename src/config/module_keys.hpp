#pragma once
// Deck keys a module declares itself: a model family (FamilyRules::keys) or an optimizer rule
// (OptimizerRules::keys) adds its own options to the model or optim section without a field in
// Config. The schema gives each one an entry like any other key's (type, bounds, reference, resume
// rule, "no effect" where the deck's family or rule does not read it); the deck's values live in
// ModelConfig::family_keys and OptimConfig::rule_keys, and the module reads them with the
// functions below.

#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "config/schema.hpp"

namespace kgpt::config {

struct ModuleKey {
  std::string dotted;  // "model.value_embed_layers": its section is model or optim
  ValueKind kind = ValueKind::integer;
  Bounds bounds;        // integer and real
  Value default_value;  // of the kind's type: long long, double, bool or std::string
  std::string doc;
};

// The key's value in `values` (a ModelConfig's family_keys, an OptimConfig's rule_keys), or the
// default its module declared. Throws for a key no registered module declares.
const Value& module_value(const ModuleValues& values, std::string_view dotted);
long long module_integer(const ModuleValues& values, std::string_view dotted);
double module_real(const ModuleValues& values, std::string_view dotted);
bool module_boolean(const ModuleValues& values, std::string_view dotted);
std::string module_string(const ModuleValues& values, std::string_view dotted);

// Every key the registered families and optimizer rules declare, once each, in registration order
// (modules that declare the same key give it the same type and default; each of them reads it).
std::vector<const ModuleKey*> module_keys();

}  // namespace kgpt::config
