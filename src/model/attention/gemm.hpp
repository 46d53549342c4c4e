#pragma once
// Attention as strided batched GEMMs with an explicit causal softmax (attention/softmax.hpp). Keeps P,
// (B, H, T, T) of the activation type, per layer for the backward; the scores and their gradient
// live in one shared (B, H, T, T) scratch of the compute type (aliasing P's memory where the two
// types are the same).

#include <string>
#include <type_traits>
#include <vector>

#include "core/profile.hpp"
#include "model/attention/attention.hpp"
#include "model/attention/softmax.hpp"
#include "model/storage.hpp"

namespace kgpt::model {

template <class A>
class GemmAttention final : public Attention<A> {
  using T = compute_t<A>;
  static constexpr bool same = std::is_same<A, T>::value;

 public:
  GemmAttention(const AttentionShape& s, const std::string& prefix) {
    const std::size_t slice = slice_of(s);
    for (int l = 0; l < s.layers; ++l) probs_.emplace_back(prefix + "probs", slice);
    scores_ = Buffer<T>(prefix + "attention_scores", slice);
    if (!same) ds_ = Buffer<A>(prefix + "attention_ds", slice);
  }

  // What the constructor allocates for this shape.
  static std::size_t bytes(const AttentionShape& s) {
    return slice_of(s) * (s.layers * sizeof(A) + sizeof(T) + (same ? 0 : sizeof(A)));
  }

  const char* name() const override { return "gemm"; }

  void forward(const ExecSpace& exec, int layer, const Heads<const A>& q, const Heads<const A>& k,
               const Heads<const A>& v, const Heads<A>& o) override {
    const profile::Region region(exec, "attention (gemm) forward", attention_flops(q, false));
    A* probs = probs_.at(static_cast<std::size_t>(layer)).vec(size(q)).data();
    T* scores = same ? reinterpret_cast<T*>(probs) : scores_.vec(size(q)).data();
    ops::attention_forward<A>(exec, q, k, v, scores, probs, o);
  }

  void backward(const ExecSpace& exec, int layer, const Heads<const A>& q, const Heads<const A>& k,
                const Heads<const A>& v, const Heads<const A>&, const Heads<const A>& d_o, const Heads<A>& dq,
                const Heads<A>& dk, const Heads<A>& dv) override {
    const profile::Region region(exec, "attention (gemm) backward", attention_flops(q, true));
    const A* probs = probs_.at(static_cast<std::size_t>(layer)).vec(size(q)).data();
    T* dp = scores_.vec(size(q)).data();
    A* ds = same ? reinterpret_cast<A*>(dp) : ds_.vec(size(q)).data();
    ops::attention_backward<A>(exec, q, k, v, probs, d_o, dp, ds, dq, dk, dv);
  }

 private:
  static std::size_t slice_of(const AttentionShape& s) {
    return static_cast<std::size_t>(s.max_batch) * s.heads * s.max_seq * s.max_seq;
  }
  static std::size_t size(const Heads<const A>& q) {
    return static_cast<std::size_t>(q.batch) * q.heads * q.seq * q.seq;
  }
  std::vector<Buffer<A>> probs_;
  Buffer<T> scores_;
  Buffer<A> ds_;
};

}  // namespace kgpt::model
