#pragma once
// `kgpt check DECK --device` also times, for a family whose MLP goes through GELU (one that reads
// model.gelu_epilogue), the two products GELU can ride in, at the deck's micro-batch on this
// machine's device: the up projection into GELU (forward) and the down projection's input gradient
// through GELU (backward). Each runs with GELU in the product where the backend can (gemm_gelu:
// cuBLASLt's epilogues) and as the product followed by the activation's kernel, side by side,
// whatever the deck's model.gelu_epilogue; the two ways' outputs are compared.

#include <cstddef>

#include "config/config.hpp"

namespace kgpt::probes {

struct GeluProbe {
  std::size_t rows = 0, width = 0, hidden = 0;  // N x F = (N x C) (C x F)
  bool fused_forward = false, fused_backward = false;  // whether the backend put GELU into each product
  double fused_ms = -1;  // both products with GELU in them where it could, the fastest of three runs
  double apart_ms = 0;   // both products, each followed by the activation's kernel
  double max_difference = 0;  // between the two ways' GELU outputs and input gradients: max |a - b| / (1 + |b|)
  double tolerance = 0;       // what the activation type's rounding allows
};

// Throws Error (ExitCode::failure) with the library's message when a product cannot run, or naming
// the difference when the two ways disagree beyond the tolerance.
GeluProbe probe_gelu(const config::ModelConfig& model, int batch, int seq);

}  // namespace kgpt::probes
