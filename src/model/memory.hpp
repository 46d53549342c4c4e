#pragma once
// The device memory a model of a deck's configuration holds, from the same declarations and sizes
// its constructor allocates with, without allocating anything: for the memory plan
// (train/memory_plan.hpp) of decks too large for the machine that checks them.

#include <cstddef>

#include "config/config.hpp"

namespace kgpt::model {

// Which backend the model would run on: this build's, or the GPU's for a plan made on a CPU build.
struct MemoryTarget {
  bool gpu = false;    // CUDA: bf16 shadows in device memory, the sorted embedding gradient's workspace
  bool cudnn = false;  // attention auto resolves to cuDNN where it can
};
MemoryTarget this_build();
MemoryTarget gpu_build();

struct ModelMemory {
  std::size_t parameters = 0;         // fp32 values
  std::size_t gradients = 0;          // fp32, the same layout
  std::size_t weight_shadow = 0;      // the bf16 copy the products read (train.precision: bf16)
  std::size_t activations = 0;        // every activation, scratch and attention buffer
  std::size_t fp8_operands = 0;       // the rounded operands of the FP8 products (model.fp8)
  std::size_t library_workspace = 0;  // cuBLASLt's and (estimated) cuDNN's
  config::Attention attention = config::Attention::gemm;  // what model.attention resolves to there
};

// For micro-batches of up to max_batch sequences of max_seq tokens, with float parameters.
ModelMemory model_memory(const config::ModelConfig& model, int max_batch, int max_seq, const MemoryTarget& target);

}  // namespace kgpt::model
