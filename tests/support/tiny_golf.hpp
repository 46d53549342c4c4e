#pragma once
// The smallest golf model the optimizer tests step: two blocks of width 16, grouped-query attention,
// its matrices in four shapes.

#include <string>

#include "config/config.hpp"

namespace kgpt::testing {

inline config::Config tiny_golf(const std::string& matrix_optimizer = "muon", int vocab_size = 37) {
  config::Config c;
  c.model.family = "golf";
  c.model.vocab_size = vocab_size;
  c.model.n_layer = 2;
  c.model.d_model = 16;
  c.model.n_head = 2;
  c.model.n_kv_head = 1;
  c.model.mlp_mult = 2;
  c.optim.matrix_optimizer = matrix_optimizer;
  return c;
}

}  // namespace kgpt::testing
