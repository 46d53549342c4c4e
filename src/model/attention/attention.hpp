#pragma once
// Causal self-attention of every layer of a model, with the storage its backward needs, behind one
// interface over token-major heads (model/attention/heads.hpp). Implementations compute the same function
// (tested against each other, finite differences and causality):
//   gemm  (attention/gemm.hpp): strided batched GEMMs; keeps P (B, H, T, T) per layer
//   fused (attention/fused.hpp): Kokkos kernels with an online softmax on CUDA cores; keeps only the
//         row log-sum-exp (B, H, T) per layer
//   cudnn (attention/cudnn.hpp, CUDA builds with cuDNN): cuDNN's fused flash attention on the tensor
//         cores, bf16 inputs, fp32 softmax statistics; keeps the row statistics per layer
// model.attention picks one; resolve_attention turns auto into the fastest one this build and
// precision have, and make_attention is the one place that builds them.

#include <memory>
#include <string>

#include "config/config.hpp"
#include "core/views.hpp"
#include "config/attention_capabilities.hpp"
#include "model/attention/heads.hpp"
#include "model/recompute.hpp"

namespace kgpt::model {

template <class A>
class Attention {
 public:
  virtual ~Attention() = default;
  virtual const char* name() const = 0;
  // q, o: (B, H, T, D) heads; k, v: (B, KV, T, D) heads.
  virtual void forward(const ExecSpace& exec, int layer, const Heads<const A>& q, const Heads<const A>& k,
                       const Heads<const A>& v, const Heads<A>& o) = 0;
  // Writes dq, dk and dv from d_o, with the inputs and output of the same layer's forward.
  virtual void backward(const ExecSpace& exec, int layer, const Heads<const A>& q, const Heads<const A>& k,
                        const Heads<const A>& v, const Heads<const A>& o, const Heads<const A>& d_o,
                        const Heads<A>& dq, const Heads<A>& dk, const Heads<A>& dv) = 0;
};

struct AttentionShape {
  int layers = 0, max_batch = 0, heads = 0, kv_heads = 0, max_seq = 0, head_dim = 0;
  bool deterministic = true;  // cudnn: the deterministic backward (model.attention_deterministic)
};

// The attention of a model of this configuration built for micro-batches of up to max_batch
// sequences of up to max_seq tokens. What it keeps for the backward (statistics or probabilities)
// is kept per working set of the recompute plan (model/recompute.hpp): per layer, or one shared by
// the rebuilt blocks, which run their attention again, as layer attention_layer(), just before
// their backward.
inline AttentionShape attention_shape(const config::ModelConfig& m, int max_batch, int max_seq) {
  const HeadShape h = head_shape(m);
  return AttentionShape{RecomputePlan(m).sets(), max_batch, h.heads, h.kv_heads, max_seq, h.dim, m.attention_deterministic};
}
inline int attention_layer(const config::ModelConfig& m, int layer) { return RecomputePlan(m).set(layer); }

// The implementation model.attention names. auto takes, in order: cudnn where this build has it,
// the precision is bf16 and the head dimension suits it; else gemm. (The fused kernels run on CUDA
// cores and are slower than gemm's tensor-core products on a GPU and BLAS on the host: they are
// chosen only by name, for their memory.)
config::Attention resolve_attention(const config::ModelConfig& model);
const char* attention_name(const config::ModelConfig& model);
// The same choice for a build that has cuDNN or not (a memory plan for another machine).
config::Attention resolve_attention(const config::ModelConfig& model, bool cudnn_available);

// The device memory of an attention implementation of this shape: what it allocates (per-layer
// statistics or probabilities, scratch), and the workspace it asks a library for (cuDNN's, which
// cuDNN sizes when it builds the graphs: estimated by cudnn_workspace_estimate).
struct AttentionMemory {
  std::size_t activations = 0;
  std::size_t library_workspace = 0;
};
AttentionMemory attention_memory(config::Attention kind, const AttentionShape& shape, config::Precision precision);
// The bytes of cuDNN's workspace for this shape, as its backward graph needs them: the fp32
// softmax sums (B H T x 4 bytes), and with the deterministic backward the whole dP of every
// (batch, head) in bf16 (B H T'^2 x 2 bytes, T' = T rounded up to 64), without it the fp32 dQ
// accumulator (B H T D x 4 bytes); with grouped K/V heads, fp32 dK and dV (2 B H_kv T D x 4 bytes).
// The engine's own scratch is not in it; a GPU run's view_peak_mb counts the real workspace.
std::size_t cudnn_workspace_estimate(const AttentionShape& shape);

template <class A>
std::unique_ptr<Attention<A>> make_attention(config::Attention choice, const AttentionShape& shape,
                                             const std::string& label_prefix);

}  // namespace kgpt::model
