#pragma once
// Attention as strided batched GEMMs with an explicit causal softmax (ops/attention.hpp). Keeps P,
// (B, H, T, T), per layer for the backward, and one more such array as the backward's scratch
// (dP of every (b, h) slice, so the products batch).

#include <string>
#include <vector>

#include "model/causal_attention.hpp"
#include "model/ops/attention.hpp"
#include "model/workspace.hpp"

namespace kgpt::model {

template <class T>
class GemmAttention final : public Attention<T> {
 public:
  GemmAttention(const AttentionShape& s, GemmPrecision precision, const std::string& prefix) : precision_(precision) {
    const std::size_t slice = static_cast<std::size_t>(s.max_batch) * s.heads * s.max_seq * s.max_seq;
    for (int l = 0; l < s.layers; ++l) probs_.emplace_back(prefix + "probs", slice);
    scratch_ = Buffer<T>(prefix + "attention_scratch", slice);
  }

  const char* name() const override { return "gemm"; }

  void forward(const ExecSpace& exec, int layer, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
               const ConstTensor4<T>& v, const Tensor4<T>& o) override {
    const std::size_t b = q.extent(0), h = q.extent(1), t = q.extent(2);
    ops::attention_forward<T>(exec, q, k, v, probs_.at(static_cast<std::size_t>(layer)).t4(b, h, t, t), o, precision_);
  }

  void backward(const ExecSpace& exec, int layer, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
                const ConstTensor4<T>& v, const ConstTensor4<T>&, const ConstTensor4<T>& d_o, const Tensor4<T>& dq,
                const Tensor4<T>& dk, const Tensor4<T>& dv) override {
    const std::size_t b = q.extent(0), h = q.extent(1), t = q.extent(2);
    ops::attention_backward<T>(exec, q, k, v, probs_.at(static_cast<std::size_t>(layer)).t4(b, h, t, t), d_o, dq, dk,
                               dv, scratch_.t4(b, h, t, t), precision_);
  }

 private:
  GemmPrecision precision_;
  std::vector<Buffer<T>> probs_;
  Buffer<T> scratch_;
};

}  // namespace kgpt::model
