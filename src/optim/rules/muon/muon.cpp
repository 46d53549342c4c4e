#include "optim/rules/muon/muon.hpp"

#include <algorithm>
#include <memory>

#include "config/deck.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "optim/rules/muon/muon_rule.hpp"

namespace kgpt::optim {

namespace {

template <class T>
std::unique_ptr<Rule<T>> make(const model::Parameters<T>& params, const RuleSetup& setup) {
  return std::make_unique<MuonRule<T>>(params, setup, muon_plan<T>(setup), "muon_momentum");
}

template <class T>
std::size_t bytes(const RuleSetup& setup) {
  return muon_plan_bytes<T>(muon_plan<T>(setup));
}

std::vector<double> loads(const RuleSetup& setup) {
  std::vector<double> load;
  muon_owners(setup, &load);
  return load;
}

}  // namespace

void check_muon_keys(const config::ResolvedDeck& deck, std::vector<std::string>& problems) {
  const config::OptimConfig& optim = deck.config.optim;
  if (optim.muon_momentum_warmup_start > optim.muon_momentum) {
    problems.push_back(deck.where("optim.muon_momentum_warmup_start") + ": warmup start " +
                       text::format_double(optim.muon_momentum_warmup_start) + " is above " +
                       "optim.muon_momentum = " + text::format_double(optim.muon_momentum) + " (" +
                       deck.origin("optim.muon_momentum").describe() + ")");
  }
}

std::vector<int> muon_owners(const RuleSetup& setup, std::vector<double>* loads) {
  const auto& entries = setup.layout->entries();
  std::vector<int> owners(setup.tensors.size(), -1);
  std::vector<std::pair<double, std::size_t>> costs;  // (arithmetic, place in setup.tensors)
  for (std::size_t k = 0; k < setup.tensors.size(); ++k) {
    const model::TensorEntry& e = entries[setup.tensors[k]];
    costs.emplace_back(newton_schulz_flops(e.spec.shape[0], e.spec.shape[1], setup.config->optim.muon_backend_steps), k);
  }
  std::stable_sort(costs.begin(), costs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<double> load(static_cast<std::size_t>(std::max(setup.sharing.ranks, 1)), 0.0);
  for (const auto& [cost, k] : costs) {
    const std::size_t rank = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[rank] += cost;
    owners[k] = static_cast<int>(rank);
  }
  if (loads != nullptr) *loads = std::move(load);
  return owners;
}

RuleEntry muon_rule() {
  RuleEntry entry;
  entry.name = "muon";
  entry.summary = "Newton-Schulz orthogonalised momentum";
  entry.reads = kMuonKeys;
  entry.rules = kMuonKeyRules;
  entry.check = check_muon_keys;
  entry.state = {"muon_momentum"};
  entry.memory = "Muon momentum and Newton-Schulz workspaces";
  entry.loads = loads;
  entry.for_float = {make<float>, bytes<float>};
  entry.for_double = {make<double>, bytes<double>};
  return entry;
}

}  // namespace kgpt::optim
