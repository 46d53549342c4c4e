#pragma once
// `kgpt check DECK --device` also times the output head's three products (the logits, the gradient
// reaching the head's input, the gradient of its weights) at the deck's micro-batch on this
// machine's device as the model runs them: the logits' rows the vocabulary rounded up to 64
// elements apart, and on a GPU the three products that wide too (model_base.hpp). Where
// the vocabulary is not a multiple of 64 it also times the products the other width, and rows as
// wide as the vocabulary: what each padding gains here, measured side by side (GPT-2's 50,257
// columns leave every row after the first on a 2-byte boundary, and cuBLASLt has no fast kernel
// for that side).

#include <cstddef>

#include "config/config.hpp"

namespace kgpt::probes {

struct HeadProbe {
  std::size_t rows = 0, width = 0, vocab = 0;  // N x V logits from N x C inputs
  std::size_t row_stride = 0;                  // as the model keeps them
  std::size_t product_cols = 0;                // the three products' width as the model runs them
  double kept_ms = 0;                          // the three products, the fastest of three runs
  double other_cols_ms = -1;                   // with the products' other width; -1 when row_stride is vocab
  double unpadded_ms = -1;                     // rows vocab apart, products vocab wide; -1 likewise
  double flops = 0;                            // of the three products
};

// Throws Error (ExitCode::failure) with the library's message when a product cannot run.
HeadProbe probe_head(const config::ModelConfig& model, int batch, int seq);

}  // namespace kgpt::probes
