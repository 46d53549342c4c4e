#pragma once
// Causal self-attention of every layer of a model, with the storage its backward needs, behind one
// interface. Implementations compute the same function (tested against each other, finite
// differences and causality):
//   gemm  (attention_gemm.hpp): strided batched GEMMs; keeps P (B, H, T, T) per layer
//   fused (attention_fused.hpp): Kokkos kernels with an online softmax; keeps only the row
//         log-sum-exp (B, H, T) per layer, so memory no longer grows with T^2
// model.attention picks one; resolve_attention turns auto into the choice for this backend, and
// make_attention is the one place that builds them.

#include <memory>
#include <string>

#include "config/config.hpp"
#include "core/views.hpp"
#include "model/gemm.hpp"

namespace kgpt::model {

template <class T>
class Attention {
 public:
  virtual ~Attention() = default;
  virtual const char* name() const = 0;
  // q, o: (B, H, T, D); k, v: (B, KV, T, D).
  virtual void forward(const ExecSpace& exec, int layer, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
                       const ConstTensor4<T>& v, const Tensor4<T>& o) = 0;
  // Writes dq, dk and dv from d_o, with the inputs and output of the same layer's forward.
  virtual void backward(const ExecSpace& exec, int layer, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
                        const ConstTensor4<T>& v, const ConstTensor4<T>& o, const ConstTensor4<T>& d_o,
                        const Tensor4<T>& dq, const Tensor4<T>& dk, const Tensor4<T>& dv) = 0;
};

struct AttentionShape {
  int layers = 0, max_batch = 0, heads = 0, kv_heads = 0, max_seq = 0, head_dim = 0;
};

// The attention of a model of this configuration built for micro-batches of up to max_batch
// sequences of up to max_seq tokens.
inline AttentionShape attention_shape(const config::ModelConfig& m, int max_batch, int max_seq) {
  return AttentionShape{m.n_layer, max_batch, m.n_head, m.n_kv_head, max_seq, m.d_model / m.n_head};
}

// The implementation model.attention names; auto resolves by backend: the fused kernels on GPUs
// (where P of a 1024-token golf layer alone is 2 GiB), the GEMM path on the host, where BLAS
// measured faster (2.8x on the tiny deck). Head dimensions the fused kernels lack take gemm.
config::Attention resolve_attention(config::Attention choice, int head_dim);
const char* attention_name(config::Attention choice, int head_dim);

template <class T>
std::unique_ptr<Attention<T>> make_attention(config::Attention choice, const AttentionShape& shape,
                                             GemmPrecision precision, const std::string& label_prefix);

}  // namespace kgpt::model
