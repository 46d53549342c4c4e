#pragma once
// The parameter layouts of the two model families, from their declarations (declare_golf,
// declare_gpt2), with the tensor names of their PyTorch counterparts (parameter-golf's
// train_gpt.py and nanoGPT's model.py) so weights can be compared and exchanged tensor by tensor.

#include "config/config.hpp"
#include "model/parameters.hpp"

namespace kgpt::model {

ParameterLayout golf_layout(const config::ModelConfig& model);
// gpt2 learns block_size positions.
ParameterLayout gpt2_layout(const config::ModelConfig& model, int block_size);
// The layout of the deck's family.
ParameterLayout model_layout(const config::ModelConfig& model, int block_size);

}  // namespace kgpt::model
