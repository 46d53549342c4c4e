#pragma once
// Attention as fused Kokkos kernels (ops/flash_attention.hpp): an online softmax per query row that
// keeps only the row log-sum-exp (B, H, T) per layer; the backward recomputes P row by row and uses
// delta (B, H, T) as scratch.

#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/causal_attention.hpp"
#include "model/ops/flash_attention.hpp"
#include "model/workspace.hpp"

namespace kgpt::model {

template <class T>
class FusedAttention final : public Attention<T> {
 public:
  FusedAttention(const AttentionShape& s, const std::string& prefix) {
    if (!ops::flash_attention_supports(s.head_dim)) {
      throw Error(ExitCode::failure, "fused attention: head dimension " + std::to_string(s.head_dim) +
                                         " is not one of 8, 16, 32, 64, 128 (use model.attention: gemm)");
    }
    const std::size_t rows = static_cast<std::size_t>(s.max_batch) * s.heads * s.max_seq;
    for (int l = 0; l < s.layers; ++l) lse_.emplace_back(prefix + "lse", rows);
    delta_ = Buffer<T>(prefix + "attention_scratch", rows);
  }

  const char* name() const override { return "fused"; }

  void forward(const ExecSpace& exec, int layer, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
               const ConstTensor4<T>& v, const Tensor4<T>& o) override {
    const std::size_t b = q.extent(0), h = q.extent(1), t = q.extent(2);
    ops::flash_attention_forward<T>(exec, q, k, v, lse_.at(static_cast<std::size_t>(layer)).t3(b, h, t), o);
  }

  void backward(const ExecSpace& exec, int layer, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
                const ConstTensor4<T>& v, const ConstTensor4<T>& o, const ConstTensor4<T>& d_o, const Tensor4<T>& dq,
                const Tensor4<T>& dk, const Tensor4<T>& dv) override {
    const std::size_t b = q.extent(0), h = q.extent(1), t = q.extent(2);
    ops::flash_attention_backward<T>(exec, q, k, v, o, lse_.at(static_cast<std::size_t>(layer)).t3(b, h, t), d_o,
                                     delta_.t3(b, h, t), dq, dk, dv);
  }

 private:
  std::vector<Buffer<T>> lse_;
  Buffer<T> delta_;
};

}  // namespace kgpt::model
