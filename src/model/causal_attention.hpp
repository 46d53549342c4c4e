#pragma once
// The attention of every layer of a model, with the storage its backward needs. Two kernels compute
// the same function: the GEMM path of ops/attention.hpp keeps P (B, H, T, T) per layer, the fused
// kernels of ops/flash_attention.hpp keep only the row log-sum-exp (B, H, T) per layer, so memory
// no longer grows with T^2. model.attention picks one; auto takes the fused kernels on GPUs (where
// P of a 1024-token golf layer alone is 2 GiB) and the GEMM path on the host, where BLAS is faster.

#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/flash_attention.hpp"
#include "model/workspace.hpp"

namespace kgpt::model {

enum class AttentionKind { gemm, fused };

inline AttentionKind attention_kind(const config::ModelConfig& c) {
  if (c.attention == "gemm") return AttentionKind::gemm;
  if (c.attention == "fused") return AttentionKind::fused;
  const bool on_host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  return !on_host && ops::flash_attention_supports(c.d_model / c.n_head) ? AttentionKind::fused : AttentionKind::gemm;
}

inline const char* attention_name(AttentionKind kind) { return kind == AttentionKind::fused ? "fused" : "gemm"; }

template <class T>
class CausalAttention {
 public:
  CausalAttention() = default;
  CausalAttention(AttentionKind kind, int layers, int max_batch, int heads, int max_seq, const std::string& prefix)
      : kind_(kind) {
    const std::size_t rows = static_cast<std::size_t>(max_batch) * heads * max_seq;
    const bool fused = kind == AttentionKind::fused;
    for (int l = 0; l < layers; ++l) kept_.emplace_back(prefix + (fused ? "lse" : "probs"), fused ? rows : rows * max_seq);
    // fused: the row dot products of the backward; gemm: dP of every (b, h) slice, for batched GEMMs.
    scratch_ = Buffer<T>(prefix + "attention_scratch", fused ? rows : rows * max_seq);
  }

  AttentionKind kind() const { return kind_; }

  // q, o: (B, H, T, D); k, v: (B, KV, T, D).
  void forward(const ExecSpace& exec, int layer, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
               const ConstTensor4<T>& v, const Tensor4<T>& o) const {
    const std::size_t b = q.extent(0), h = q.extent(1), t = q.extent(2);
    const Buffer<T>& kept = kept_.at(static_cast<std::size_t>(layer));
    if (kind_ == AttentionKind::fused) {
      ops::flash_attention_forward<T>(exec, q, k, v, kept.t3(b, h, t), o);
    } else {
      ops::attention_forward<T>(exec, q, k, v, kept.t4(b, h, t, t), o);
    }
  }

  // Writes dq, dk and dv from d_o, with the inputs and output of the same layer's forward.
  void backward(const ExecSpace& exec, int layer, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
                const ConstTensor4<T>& v, const ConstTensor4<T>& o, const ConstTensor4<T>& d_o, const Tensor4<T>& dq,
                const Tensor4<T>& dk, const Tensor4<T>& dv) const {
    const std::size_t b = q.extent(0), h = q.extent(1), t = q.extent(2);
    const Buffer<T>& kept = kept_.at(static_cast<std::size_t>(layer));
    if (kind_ == AttentionKind::fused) {
      ops::flash_attention_backward<T>(exec, q, k, v, o, kept.t3(b, h, t), d_o, scratch_.t3(b, h, t), dq, dk, dv);
    } else {
      ops::attention_backward<T>(exec, q, k, v, kept.t4(b, h, t, t), d_o, dq, dk, dv, scratch_.t4(b, h, t, t));
    }
  }

 private:
  AttentionKind kind_ = AttentionKind::gemm;
  std::vector<Buffer<T>> kept_;
  Buffer<T> scratch_;
};

}  // namespace kgpt::model
