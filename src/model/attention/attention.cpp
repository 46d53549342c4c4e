#include "core/error.hpp"
#include "model/attention/fused.hpp"
#include "model/attention/gemm.hpp"
#include "model/attention/attention.hpp"
#ifdef KGPT_HAVE_CUDNN
#include "model/attention/cudnn.hpp"
#endif

namespace kgpt::model {

config::Attention resolve_attention(const config::ModelConfig& m) {
  if (m.attention != config::Attention::automatic) return m.attention;
  return attention_runs(config::Attention::cudnn, m.d_model / m.n_head, m.precision) ? config::Attention::cudnn
                                                                                     : config::Attention::gemm;
}

const char* attention_name(const config::ModelConfig& model) { return config::name_of(resolve_attention(model)); }

template <class A>
std::unique_ptr<Attention<A>> make_attention(config::Attention choice, const AttentionShape& shape,
                                             const std::string& label_prefix) {
  switch (choice) {
    case config::Attention::fused: return std::make_unique<FusedAttention<A>>(shape, label_prefix);
    case config::Attention::cudnn:
#ifdef KGPT_HAVE_CUDNN
      if constexpr (std::is_same<A, bf16>::value) return std::make_unique<CudnnAttention>(shape, label_prefix);
#endif
      throw Error(ExitCode::failure, "model.attention: cudnn needs a CUDA build with cuDNN and bf16 activations "
                                     "(train.precision: bf16)");
    case config::Attention::gemm:
    case config::Attention::automatic: break;
  }
  return std::make_unique<GemmAttention<A>>(shape, label_prefix);
}

template std::unique_ptr<Attention<float>> make_attention(config::Attention, const AttentionShape&, const std::string&);
template std::unique_ptr<Attention<double>> make_attention(config::Attention, const AttentionShape&, const std::string&);
template std::unique_ptr<Attention<bf16>> make_attention(config::Attention, const AttentionShape&, const std::string&);

}  // namespace kgpt::model
