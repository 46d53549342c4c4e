#pragma once
// The parameter lists of the two model families, with the tensor names of their PyTorch
// counterparts (parameter-golf's train_gpt.py and nanoGPT's model.py) so weights can be compared
// and exchanged tensor by tensor.

#include "config/config.hpp"
#include "model/parameters.hpp"

namespace kgpt::model {

// golf: tied embedding N(0, tied_embed_init_std); per block c_q, c_k, c_v, proj (zero), q_gain,
// mlp.fc, mlp.proj (zero), attn_scale, mlp_scale, resid_mix; U-Net skip_weights. Linear weights
// start as PyTorch's nn.Linear does: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
ParameterLayout golf_layout(const config::ModelConfig& model);

// gpt2: wte and wpe (block_size positions) N(0, 0.02); per block ln_1, c_attn (+bias), c_proj
// (+bias, N(0, 0.02/sqrt(2 n_layer))), ln_2, c_fc (4C, +bias), mlp c_proj (+bias, scaled
// likewise); ln_f. LayerNorm weights 1, biases 0.
ParameterLayout gpt2_layout(const config::ModelConfig& model, int block_size);

// The layout of the deck's family.
ParameterLayout model_layout(const config::ModelConfig& model, int block_size);

// U-Net split of golf: the first n_layer / 2 blocks are encoders, the rest decoders.
inline int golf_encoder_layers(int n_layer) { return n_layer / 2; }
inline int golf_skip_count(int n_layer) {
  const int encoders = golf_encoder_layers(n_layer);
  const int decoders = n_layer - encoders;
  return encoders < decoders ? encoders : decoders;
}

}  // namespace kgpt::model
