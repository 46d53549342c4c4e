#include "model/attention_fused.hpp"
#include "model/attention_gemm.hpp"
#include "model/causal_attention.hpp"

namespace kgpt::model {

config::Attention resolve_attention(config::Attention choice, int head_dim) {
  if (choice != config::Attention::automatic) return choice;
  return backend::on_gpu && ops::flash_attention_supports(head_dim) ? config::Attention::fused : config::Attention::gemm;
}

const char* attention_name(config::Attention choice, int head_dim) {
  return config::name_of(resolve_attention(choice, head_dim));
}

template <class T>
std::unique_ptr<Attention<T>> make_attention(config::Attention choice, const AttentionShape& shape,
                                             GemmPrecision precision, const std::string& label_prefix) {
  switch (resolve_attention(choice, shape.head_dim)) {
    case config::Attention::fused: return std::make_unique<FusedAttention<T>>(shape, label_prefix);
    case config::Attention::gemm:
    case config::Attention::automatic: break;
  }
  return std::make_unique<GemmAttention<T>>(shape, precision, label_prefix);
}

template std::unique_ptr<Attention<float>> make_attention(config::Attention, const AttentionShape&, GemmPrecision,
                                                          const std::string&);
template std::unique_ptr<Attention<double>> make_attention(config::Attention, const AttentionShape&, GemmPrecision,
                                                           const std::string&);

}  // namespace kgpt::model
