#pragma once
// The layers the forward runs and the block (the set of parameters) each layer runs. Without depth
// recurrence layer l runs block l. With it (model.recur_start s, model.recur_count k; golf), blocks
// s .. s+k-1 run twice, the second pass right after the first:
//   0 .. s+k-1, s .. s+k-1, s+k .. n_layer-1          (11 blocks, s = 4, k = 2: 13 layers)
// Activations, the attention's statistics and the recompute plan are per layer; parameters and
// their gradients per block, so a repeated block's gradient is the sum over its layers, final once
// the backward has passed its first layer.

#include <vector>

#include "config/config.hpp"
#include "config/family_rules.hpp"

namespace kgpt::model {

// Whether the model repeats blocks: model.recur_start is set and its family reads it (golf).
inline bool recurs(const config::ModelConfig& m) {
  return m.recur_start >= 0 && config::family_reads(m, "model.recur_start");
}

// How many layers the forward runs.
inline int run_layers(const config::ModelConfig& m) { return m.n_layer + (recurs(m) ? m.recur_count : 0); }

// The block each layer runs, in the forward's order.
inline std::vector<int> block_sequence(const config::ModelConfig& m) {
  std::vector<int> blocks;
  const int end = recurs(m) ? m.recur_start + m.recur_count : m.n_layer;
  for (int b = 0; b < end; ++b) blocks.push_back(b);
  if (recurs(m)) {
    for (int b = m.recur_start; b < end; ++b) blocks.push_back(b);
    for (int b = end; b < m.n_layer; ++b) blocks.push_back(b);
  }
  return blocks;
}

// How many layers run block b.
inline int runs_of(const config::ModelConfig& m, int block) {
  return recurs(m) && block >= m.recur_start && block < m.recur_start + m.recur_count ? 2 : 1;
}

}  // namespace kgpt::model
