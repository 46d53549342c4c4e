#include "model/layouts.hpp"

#include "model/families/golf/golf.hpp"
#include "model/families/gpt2/gpt2.hpp"

namespace kgpt::model {

ParameterLayout golf_layout(const config::ModelConfig& model) {
  return layout_of<GolfTensors>([&](auto& tensors, auto& visit) { declare_golf(model, tensors, visit); });
}

ParameterLayout gpt2_layout(const config::ModelConfig& model, int block_size) {
  return layout_of<Gpt2Tensors>([&](auto& tensors, auto& visit) { declare_gpt2(model, block_size, tensors, visit); });
}

ParameterLayout model_layout(const config::ModelConfig& model, int block_size) {
  return model.family == config::Family::gpt2 ? gpt2_layout(model, block_size) : golf_layout(model);
}

}  // namespace kgpt::model
