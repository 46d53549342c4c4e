#pragma once
// `kgpt check DECK --device` also times, for a bf16 deck, a block's linear layers at the deck's
// micro-batch on this machine's device, each as bf16 products and as model.fp8's FP8 products
// (ops/fp8.hpp; the passes that round and transpose the operands included): forward, dx and dW,
// side by side, whatever the deck's model.fp8, so that a deck can be told what FP8 gains per shape.

#include <cstddef>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace kgpt::probes {

struct Fp8ProbeLayer {
  std::string name;                   // "attention qkv", "attention out", "mlp up", "mlp down"
  std::size_t rows = 0, in = 0, out = 0;
  bool native = false;                // FP8 tensor-core products here, else bf16 products of rounded operands
  double bf16_ms = 0, fp8_ms = 0;     // forward, dx and dW: the fastest of three runs
  double relative_error = 0;          // FP8's y against bf16's: RMS of the difference / RMS of bf16's
};

// Throws Error (ExitCode::failure) with the library's message when a product cannot run, or when an
// FP8 output is further from the bf16 one than FP8's rounding allows.
std::vector<Fp8ProbeLayer> probe_fp8(const config::ModelConfig& model, int batch, int seq);

}  // namespace kgpt::probes
