#pragma once
// NorMuon (modded-nanogpt's record #41, after the NorMuon paper): Muon (rules/muon/) whose
// orthogonalised update is normalised neuron by neuron by a running second moment, then brought
// back to the norm Newton-Schulz gave it (rules/normuon/updates.hpp). The rule of the matrices under
// optim.matrix_optimizer: normuon. It reads Muon's keys, and its second moment decays at
// optim.beta2 (0.95, the record's). Every rank orthogonalises every matrix of its shard: the
// second moments stay the same on all ranks without an exchange of their own.

#include "optim/rules/registry.hpp"

namespace kgpt::optim {

RuleEntry normuon_rule();

}  // namespace kgpt::optim
