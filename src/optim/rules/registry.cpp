#include "optim/rules/registry.hpp"

#include "core/error.hpp"
#include "optim/rules/adamw/adamw.hpp"
#include "optim/rules/muon/muon.hpp"
#include "optim/rules/normuon/normuon.hpp"

namespace kgpt::optim {

const std::vector<RuleEntry>& registered_rules() {
  static const std::vector<RuleEntry> entries = {
      adamw_rule(),
      muon_rule(),
      normuon_rule(),
  };
  return entries;
}

const RuleEntry& rule_entry(const std::string& name) {
  for (const RuleEntry& entry : registered_rules()) {
    if (entry.name == name) return entry;
  }
  throw Error(ExitCode::failure, "optimizer: '" + name + "' is not an optimizer rule; the rules are " +
                                     config::optimizer_rule_names());
}

}  // namespace kgpt::optim

namespace kgpt::config {

const std::vector<const OptimizerRules*>& optimizer_rules() {
  static const std::vector<const OptimizerRules*> rules = [] {
    std::vector<const OptimizerRules*> all;
    for (const optim::RuleEntry& entry : optim::registered_rules()) all.push_back(&entry);
    return all;
  }();
  return rules;
}

}  // namespace kgpt::config
