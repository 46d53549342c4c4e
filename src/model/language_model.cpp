#include "model/language_model.hpp"

#include <type_traits>

#include "model/families/golf/golf.hpp"
#include "model/families/gpt2/gpt2.hpp"

namespace kgpt::model {

template <class T>
std::unique_ptr<LanguageModel<T>> make_model(const config::ModelConfig& config, int max_batch, int max_seq) {
  const bool gpt2 = config.family == config::Family::gpt2;
  if constexpr (std::is_same<T, float>::value) {
    if (config.precision == config::Precision::bf16) {
      if (gpt2) return std::make_unique<Gpt2Model<float, bf16>>(config, max_batch, max_seq);
      return std::make_unique<GolfModel<float, bf16>>(config, max_batch, max_seq);
    }
  }
  if (gpt2) return std::make_unique<Gpt2Model<T>>(config, max_batch, max_seq);
  return std::make_unique<GolfModel<T>>(config, max_batch, max_seq);
}

template std::unique_ptr<LanguageModel<float>> make_model(const config::ModelConfig&, int, int);
template std::unique_ptr<LanguageModel<double>> make_model(const config::ModelConfig&, int, int);

}  // namespace kgpt::model
