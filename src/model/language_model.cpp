#include "model/language_model.hpp"

#include "model/golf.hpp"
#include "model/gpt2.hpp"

namespace kgpt::model {

template <class T>
std::unique_ptr<LanguageModel<T>> make_model(const config::ModelConfig& config, int max_batch, int max_seq) {
  switch (config.family) {
    case config::Family::gpt2: return std::make_unique<Gpt2Model<T>>(config, max_batch, max_seq);
    case config::Family::golf: break;
  }
  return std::make_unique<GolfModel<T>>(config, max_batch, max_seq);
}

template std::unique_ptr<LanguageModel<float>> make_model(const config::ModelConfig&, int, int);
template std::unique_ptr<LanguageModel<double>> make_model(const config::ModelConfig&, int, int);

}  // namespace kgpt::model
