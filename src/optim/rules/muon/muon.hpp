#pragma once
// Muon, parameter-golf's (rules/muon/updates.hpp): Nesterov momentum, orthogonalised by Newton-Schulz
// (rules/muon/newton_schulz.hpp), scaled by the matrix's shape. The rule of the matrices under
// optim.matrix_optimizer: muon. Matrices of one shape are orthogonalised together, and ranks that
// share the work (parallel.share_muon) each orthogonalise whole matrices, balanced by their
// arithmetic, and exchange the results.

#include <string>
#include <vector>

#include "optim/rules/registry.hpp"

namespace kgpt::config {
struct ResolvedDeck;
}  // namespace kgpt::config

namespace kgpt::optim {

RuleEntry muon_rule();

// Muon's deck keys, their rule in words and its check: also a Muon variant's.
inline const std::vector<std::string> kMuonKeys = {"optim.muon_momentum", "optim.muon_momentum_warmup_start",
                                                   "optim.muon_momentum_warmup_steps", "optim.muon_backend_steps"};
inline const char* const kMuonKeyRules = "`optim.muon_momentum_warmup_start <= optim.muon_momentum`";
void check_muon_keys(const config::ResolvedDeck& deck, std::vector<std::string>& problems);

// Which of setup.sharing.ranks ranks orthogonalises each of the rule's tensors (by their place in
// setup.tensors): whole matrices, balanced by their Newton-Schulz arithmetic (newton_schulz_flops),
// the costliest first, each to the rank with the least so far (ties to the lower tensor and the
// lower rank), the same on every rank. With `loads`, each rank's arithmetic is written there.
std::vector<int> muon_owners(const RuleSetup& setup, std::vector<double>* loads = nullptr);

}  // namespace kgpt::optim
