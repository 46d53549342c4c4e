#include "core/error.hpp"
#include "model/attention/fused.hpp"
#include "model/attention/gemm.hpp"
#include "model/attention/attention.hpp"
#ifdef KGPT_HAVE_CUDNN
#include "model/attention/cudnn.hpp"
#endif

namespace kgpt::model {

config::Attention resolve_attention(const config::ModelConfig& m) {
  return resolve_attention(m, config::attention_capability(config::Attention::cudnn).built);
}

config::Attention resolve_attention(const config::ModelConfig& m, bool cudnn_available) {
  if (m.attention != config::Attention::automatic) return m.attention;
  const config::AttentionCapability& cudnn = config::attention_capability(config::Attention::cudnn);
  const bool runs = cudnn_available && cudnn.head_dim(head_shape(m).dim) &&
                    (!cudnn.bf16_only || m.precision == config::Precision::bf16);
  return runs ? config::Attention::cudnn : config::Attention::gemm;
}

std::size_t cudnn_workspace_estimate(const AttentionShape& s) {
  const std::size_t heads = static_cast<std::size_t>(s.max_batch) * s.heads;
  // The backward's fp32 softmax sums (dO . O per row), always.
  const std::size_t row_sums = heads * static_cast<std::size_t>(s.max_seq) * sizeof(float);
  // With grouped K/V heads, dK and dV are accumulated in fp32 over the query heads that share them
  // (B H_kv T D x 4 bytes each): 128 MiB at golf's 64 x 1024 with 4 K/V heads, measured on an H100.
  const std::size_t grouped =
      s.kv_heads < s.heads ? 2 * static_cast<std::size_t>(s.max_batch) * s.kv_heads * s.max_seq * s.head_dim * sizeof(float)
                           : 0;
  if (s.deterministic) {
    // The deterministic backward keeps dP = dO V^T of every (batch, head) in bf16, each sequence
    // length rounded up to 64: cudnn-frontend asks for this dP workspace on Hopper whenever the
    // deterministic algorithm is asked for.
    const std::size_t padded = (static_cast<std::size_t>(s.max_seq) + 63) / 64 * 64;
    return heads * padded * padded * 2 + row_sums + grouped;
  }
  // Otherwise dQ is accumulated in fp32 before it is written in bf16.
  return heads * static_cast<std::size_t>(s.max_seq) * s.head_dim * sizeof(float) + row_sums + grouped;
}

AttentionMemory attention_memory(config::Attention kind, const AttentionShape& s, config::Precision precision) {
  const bool bf16_acts = precision == config::Precision::bf16;
  AttentionMemory memory;
  switch (kind) {
    case config::Attention::fused:
      memory.activations = bf16_acts ? FusedAttention<bf16>::bytes(s) : FusedAttention<float>::bytes(s);
      break;
    case config::Attention::cudnn: {
      // As CudnnAttention allocates: fp32 softmax statistics (B, H, T) per layer.
      const std::size_t rows = static_cast<std::size_t>(s.max_batch) * s.heads * s.max_seq;
      memory.activations = rows * s.layers * sizeof(float);
      memory.library_workspace = cudnn_workspace_estimate(s);
      break;
    }
    case config::Attention::gemm:
    case config::Attention::automatic:
      memory.activations = bf16_acts ? GemmAttention<bf16>::bytes(s) : GemmAttention<float>::bytes(s);
      break;
  }
  return memory;
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
