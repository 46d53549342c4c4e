#pragma once
// The optimizer rules kgpt has: one line each in registry.cpp (optim/rule.hpp). The optimizer core
// builds, sizes and checkpoints the rules through here, and the deck learns their names, keys and
// checks from the config::OptimizerRules each entry extends.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "config/optimizer_rules.hpp"
#include "model/parameters.hpp"
#include "optim/rule.hpp"

namespace kgpt::optim {

template <class T>
struct RuleMaker {
  // The rule over `setup`, updating `params`.
  std::unique_ptr<Rule<T>> (*make)(const model::Parameters<T>& params, const RuleSetup& setup) = nullptr;
  // Bytes of device memory make() allocates over `setup`, allocating nothing: for the memory plan.
  std::size_t (*bytes)(const RuleSetup& setup) = nullptr;
};

struct RuleEntry : config::OptimizerRules {
  // Its state buffers, by the names checkpoints keep them under (/optim/<name>/), in that order.
  std::vector<std::string> state;
  std::string memory;          // what its state is, in the memory plan's words ("Adam moments")
  std::size_t norm_slots = 0;  // its own parts of the gradient norm (RuleStep::own_norms)
  // The arithmetic of each of setup.sharing.ranks ranks sharing the work the rule splits among them;
  // null for a rule that splits none.
  std::vector<double> (*loads)(const RuleSetup& setup) = nullptr;
  RuleMaker<float> for_float;
  RuleMaker<double> for_double;

  template <class T>
  const RuleMaker<T>& maker() const {
    if constexpr (std::is_same_v<T, float>) return for_float;
    else return for_double;
  }
};

// In registry order: the order the optimizer steps them and checkpoints their state.
const std::vector<RuleEntry>& registered_rules();
// The rule named `name` (throws Error naming the registered rules when there is none).
const RuleEntry& rule_entry(const std::string& name);

}  // namespace kgpt::optim
