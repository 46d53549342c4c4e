#pragma once
// Muon, parameter-golf's (rules/muon/updates.hpp): Nesterov momentum, orthogonalised by Newton-Schulz
// (rules/muon/newton_schulz.hpp), scaled by the matrix's shape. The rule of the matrices under
// optim.matrix_optimizer: muon. Matrices of one shape are orthogonalised together, and ranks that
// share the work (parallel.share_muon) each orthogonalise whole matrices, balanced by their
// arithmetic, and exchange the results.

#include <vector>

#include "optim/rules/registry.hpp"

namespace kgpt::optim {

RuleEntry muon_rule();

// Which of setup.sharing.ranks ranks orthogonalises each of the rule's tensors (by their place in
// setup.tensors): whole matrices, balanced by their Newton-Schulz arithmetic (newton_schulz_flops),
// the costliest first, each to the rank with the least so far (ties to the lower tensor and the
// lower rank), the same on every rank. With `loads`, each rank's arithmetic is written there.
std::vector<int> muon_owners(const RuleSetup& setup, std::vector<double>* loads = nullptr);

}  // namespace kgpt::optim
