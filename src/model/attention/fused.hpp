#pragma once
// Attention as fused Kokkos kernels (attention/flash_kernels.hpp): an online softmax per query row that
// keeps only the row log-sum-exp (B, H, T) per layer; the backward recomputes P row by row and uses
// delta (B, H, T) as scratch.

#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/profile.hpp"
#include "model/attention/attention.hpp"
#include "model/attention/flash_kernels.hpp"
#include "model/storage.hpp"

namespace kgpt::model {

template <class A>
class FusedAttention final : public Attention<A> {
  using T = compute_t<A>;

 public:
  FusedAttention(const AttentionShape& s, const std::string& prefix) {
    const config::AttentionCapability& can = config::attention_capability(config::Attention::fused);
    if (!can.head_dim(s.head_dim)) {
      throw Error(ExitCode::failure, "fused attention: head dimension " + std::to_string(s.head_dim) + " is not " +
                                         can.head_dims + " (use model.attention: gemm)");
    }
    const std::size_t rows = rows_of(s);
    for (int l = 0; l < s.layers; ++l) lse_.emplace_back(prefix + "lse", rows);
    delta_ = Buffer<T>(prefix + "attention_delta", rows);
  }

  // What the constructor allocates for this shape.
  static std::size_t bytes(const AttentionShape& s) { return rows_of(s) * (s.layers + 1) * sizeof(T); }
  static std::size_t rows_of(const AttentionShape& s) {
    return static_cast<std::size_t>(s.max_batch) * s.heads * s.max_seq;
  }

  const char* name() const override { return "fused"; }

  void forward(const ExecSpace& exec, int layer, const Heads<const A>& q, const Heads<const A>& k,
               const Heads<const A>& v, const Heads<A>& o) override {
    const profile::Region region(exec, "attention (fused) forward", attention_flops(q, false));
    ops::flash_attention_forward<A>(exec, q, k, v, lse_.at(static_cast<std::size_t>(layer)).t3(q.batch, q.heads, q.seq),
                                    o);
  }

  void backward(const ExecSpace& exec, int layer, const Heads<const A>& q, const Heads<const A>& k,
                const Heads<const A>& v, const Heads<const A>& o, const Heads<const A>& d_o, const Heads<A>& dq,
                const Heads<A>& dk, const Heads<A>& dv) override {
    const profile::Region region(exec, "attention (fused) backward", attention_flops(q, true));
    ops::flash_attention_backward<A>(exec, q, k, v, o,
                                     lse_.at(static_cast<std::size_t>(layer)).t3(q.batch, q.heads, q.seq), d_o,
                                     delta_.t3(q.batch, q.heads, q.seq), dq, dk, dv);
  }

 private:
  std::vector<Buffer<T>> lse_;
  Buffer<T> delta_;
};

}  // namespace kgpt::model
