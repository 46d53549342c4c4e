#pragma once
// `kgpt check DECK --device` also times the output head's three products (the logits, the gradient
// reaching the head's input, the gradient of its weights) at the deck's micro-batch on this
// machine's device, with the logits' rows as the model keeps them (the vocabulary rounded up to 64
// elements apart, model_base.hpp) and, where that differs, with rows as wide as the vocabulary: what
// the padding gains here, measured side by side (GPT-2's 50,257 columns leave every row after the
// first on a 2-byte boundary).

#include <cstddef>

#include "config/config.hpp"

namespace kgpt::model {

struct HeadProbe {
  std::size_t rows = 0, width = 0, vocab = 0;  // N x V logits from N x C inputs
  std::size_t row_stride = 0;                  // as the model keeps them
  double kept_ms = 0;                          // the three products, the fastest of three runs
  double unpadded_ms = -1;                     // the same with rows vocab apart; -1 when that is row_stride
  double flops = 0;                            // of the three products
};

// Throws Error (ExitCode::failure) with the library's message when a product cannot run.
HeadProbe probe_head(const config::ModelConfig& model, int batch, int seq);

}  // namespace kgpt::model
