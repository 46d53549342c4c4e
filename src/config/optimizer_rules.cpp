#include "config/optimizer_rules.hpp"

namespace kgpt::config {

bool OptimizerRules::reads_key(std::string_view dotted) const {
  for (const auto& key : reads) {
    if (key == dotted) return true;
  }
  for (const auto& key : keys) {
    if (key.dotted == dotted) return true;
  }
  return false;
}

const OptimizerRules* find_optimizer_rules(const std::string& name) {
  for (const OptimizerRules* r : optimizer_rules()) {
    if (r->name == name) return r;
  }
  return nullptr;
}

std::string optimizer_rule_names() {
  std::string names;
  for (const OptimizerRules* r : optimizer_rules()) names += (names.empty() ? "" : ", ") + r->name;
  return names;
}

}  // namespace kgpt::config
