#pragma once
// Adam(W), torch.optim's (rules/adamw/updates.hpp): two moments per element, the group's learning
// rate and decoupled weight decay. The rule of the embeddings, the head, vectors and scalars, and of
// the matrices under optim.matrix_optimizer: adamw. Its tensors go in one launch on a GPU
// (adam_update_all), one launch each on the host.

#include "optim/rules/registry.hpp"

namespace kgpt::optim {

RuleEntry adamw_rule();

}  // namespace kgpt::optim
