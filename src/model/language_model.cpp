#include "model/language_model.hpp"

#include "model/family.hpp"

namespace kgpt::model {

template <>
std::unique_ptr<LanguageModel<float>> make_model(const config::ModelConfig& config, int max_batch, int max_seq) {
  return family(config.family).make_float(config, max_batch, max_seq);
}

template <>
std::unique_ptr<LanguageModel<double>> make_model(const config::ModelConfig& config, int max_batch, int max_seq) {
  return family(config.family).make_double(config, max_batch, max_seq);
}

}  // namespace kgpt::model
