#pragma once
// Fused causal attention that keeps no T x T matrix: each query row streams over its keys with an
// online softmax (a running maximum and sum, rescaled when the maximum grows), and the backward
// recomputes each probability from the row's log-sum-exp, as FlashAttention does. Same inputs and
// results as attention.hpp, grouped-query attention included (query head h reads key/value head
// h / (H / KV)); q, k, v, o and their gradients are Heads (model/attention/heads.hpp) of activations A,
// arithmetic is in compute_t<A>; the forward keeps lse (B, H, T) instead of P (B, H, T, T), and the
// backward uses delta (B, H, T) = rowsum(dO * O) as scratch:
//   p_ij = exp(s q_i.k_j - lse_i), dS_ij = p_ij (dO_i.v_j - delta_i),
//   dQ_i = s sum_j dS_ij k_j, dK_j = s sum_i dS_ij q_i, dV_j = sum_i p_ij dO_i,
// with dK and dV summed over the query heads that share a key/value head.
// One thread per query row (forward, dQ) and per key row (dK, dV), on CUDA cores: correct and
// memory-lean, but far from the tensor cores (model.attention: cudnn is the GPU path; gemm is
// faster where cuDNN is missing). The head dimension D is a template parameter so that a row's
// accumulators stay in registers: D in {8, 16, 32, 64, 128}.

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "config/attention_capabilities.hpp"
#include "model/attention/heads.hpp"
#include "core/kernel.hpp"

namespace kgpt::model::ops {

namespace flash_detail {

template <class A, int D>
struct Forward {
  using T = compute_t<A>;
  Heads<const A> q, k, v;
  Tensor3<T> lse;
  Heads<A> o;
  int heads, steps, group;
  T scale;

  KOKKOS_INLINE_FUNCTION void operator()(const int row) const {
    const int i = row % steps, bh = row / steps, hq = bh % heads, b = bh / heads, g = hq / group;
    T qr[D], acc[D];
    for (int x = 0; x < D; ++x) qr[x] = T(q(b, hq, i, x)) * scale;
    // Key 0 starts the running maximum m, the sum l of exp(s - m) and the weighted sum acc of values.
    T m = 0;
    for (int x = 0; x < D; ++x) m += qr[x] * T(k(b, g, 0, x));
    T l = 1;
    for (int x = 0; x < D; ++x) acc[x] = T(v(b, g, 0, x));
    for (int j = 1; j <= i; ++j) {
      T s = 0;
      for (int x = 0; x < D; ++x) s += qr[x] * T(k(b, g, j, x));
      if (s > m) {
        const T c = compat::exp(m - s);
        l *= c;
        for (int x = 0; x < D; ++x) acc[x] *= c;
        m = s;
      }
      const T p = compat::exp(s - m);
      l += p;
      for (int x = 0; x < D; ++x) acc[x] += p * T(v(b, g, j, x));
    }
    const T inverse = T(1) / l;
    for (int x = 0; x < D; ++x) o(b, hq, i, x) = store<A>(acc[x] * inverse);
    lse(b, hq, i) = m + compat::log(l);
  }
};

// dQ of one query row; also writes delta_i = dO_i . O_i for the key pass.
template <class A, int D>
struct BackwardQuery {
  using T = compute_t<A>;
  Heads<const A> q, k, v, o, d_o;
  ConstTensor3<T> lse;
  Tensor3<T> delta;
  Heads<A> dq;
  int heads, steps, group;
  T scale;

  KOKKOS_INLINE_FUNCTION void operator()(const int row) const {
    const int i = row % steps, bh = row / steps, hq = bh % heads, b = bh / heads, g = hq / group;
    T qr[D], dor[D], acc[D];
    T dot = 0;
    for (int x = 0; x < D; ++x) {
      qr[x] = T(q(b, hq, i, x)) * scale;
      dor[x] = T(d_o(b, hq, i, x));
      dot += dor[x] * T(o(b, hq, i, x));
      acc[x] = 0;
    }
    delta(b, hq, i) = dot;
    const T row_lse = lse(b, hq, i);
    for (int j = 0; j <= i; ++j) {
      T s = 0, dp = 0;
      for (int x = 0; x < D; ++x) {
        s += qr[x] * T(k(b, g, j, x));
        dp += dor[x] * T(v(b, g, j, x));
      }
      const T ds = compat::exp(s - row_lse) * (dp - dot);
      for (int x = 0; x < D; ++x) acc[x] += ds * T(k(b, g, j, x));
    }
    for (int x = 0; x < D; ++x) dq(b, hq, i, x) = store<A>(acc[x] * scale);
  }
};

// dK and dV of one key row of key/value head g, summed over the query heads of its group.
template <class A, int D>
struct BackwardKey {
  using T = compute_t<A>;
  Heads<const A> q, k, v, d_o;
  ConstTensor3<T> lse, delta;
  Heads<A> dk, dv;
  int kv_heads, steps, group;
  T scale;

  KOKKOS_INLINE_FUNCTION void operator()(const int row) const {
    const int j = row % steps, bg = row / steps, g = bg % kv_heads, b = bg / kv_heads;
    T kr[D], vr[D], dk_acc[D], dv_acc[D];
    for (int x = 0; x < D; ++x) {
      kr[x] = T(k(b, g, j, x)) * scale;
      vr[x] = T(v(b, g, j, x));
      dk_acc[x] = 0;
      dv_acc[x] = 0;
    }
    for (int hq = g * group; hq < (g + 1) * group; ++hq) {
      for (int i = j; i < steps; ++i) {
        T s = 0, dp = 0;
        for (int x = 0; x < D; ++x) {
          s += kr[x] * T(q(b, hq, i, x));
          dp += vr[x] * T(d_o(b, hq, i, x));
        }
        const T p = compat::exp(s - lse(b, hq, i));
        const T ds = p * (dp - delta(b, hq, i));
        for (int x = 0; x < D; ++x) {
          dv_acc[x] += p * T(d_o(b, hq, i, x));
          dk_acc[x] += ds * T(q(b, hq, i, x));
        }
      }
    }
    for (int x = 0; x < D; ++x) {
      dk(b, g, j, x) = store<A>(dk_acc[x] * scale);
      dv(b, g, j, x) = store<A>(dv_acc[x]);
    }
  }
};

// The head dimensions the kernels are compiled for: those the capability table lists for fused
// (config/attention_capabilities.hpp); a test keeps the two equal.
template <class A, template <class, int> class Kernel, class Make>
void launch(const ExecSpace& exec, const char* label, int rows, int d, const Make& make) {
  const Kokkos::RangePolicy<ExecSpace> policy(exec, 0, rows);
  switch (d) {
    case 8: kgpt::parallel_for(label, policy, make(Kernel<A, 8>{})); return;
    case 16: kgpt::parallel_for(label, policy, make(Kernel<A, 16>{})); return;
    case 32: kgpt::parallel_for(label, policy, make(Kernel<A, 32>{})); return;
    case 64: kgpt::parallel_for(label, policy, make(Kernel<A, 64>{})); return;
    case 128: kgpt::parallel_for(label, policy, make(Kernel<A, 128>{})); return;
    default: break;
  }
  throw Error(ExitCode::failure, "fused attention: head dimension " + std::to_string(d) + " is not " +
                                     config::attention_capability(config::Attention::fused).head_dims +
                                     " (use model.attention: gemm)");
}

}  // namespace flash_detail

// q, o: (B, H, T, D) heads; k, v: (B, KV, T, D) heads; lse: (B, H, T), kept for the backward.
template <class A>
void flash_attention_forward(const ExecSpace& exec, const Heads<const A>& q, const Heads<const A>& k,
                             const Heads<const A>& v, const Tensor3<compute_t<A>>& lse, const Heads<A>& o) {
  using T = compute_t<A>;
  const int b = q.batch, h = q.heads, t = q.seq, d = q.dim, group = h / k.heads;
  const T scale = T(1) / compat::sqrt(static_cast<T>(d));
  flash_detail::launch<A, flash_detail::Forward>(exec, "kgpt::flash_attention::forward", b * h * t, d, [&](auto kernel) {
    kernel.q = q, kernel.k = k, kernel.v = v, kernel.lse = lse, kernel.o = o;
    kernel.heads = h, kernel.steps = t, kernel.group = group, kernel.scale = scale;
    return kernel;
  });
}

// d_o: (B, H, T, D) -> dq (B, H, T, D), dk, dv (B, KV, T, D), written (not added to); delta: (B, H, T) scratch.
template <class A>
void flash_attention_backward(const ExecSpace& exec, const Heads<const A>& q, const Heads<const A>& k,
                              const Heads<const A>& v, const Heads<const A>& o, const ConstTensor3<compute_t<A>>& lse,
                              const Heads<const A>& d_o, const Tensor3<compute_t<A>>& delta, const Heads<A>& dq,
                              const Heads<A>& dk, const Heads<A>& dv) {
  using T = compute_t<A>;
  const int b = q.batch, h = q.heads, t = q.seq, d = q.dim, kv = k.heads, group = h / kv;
  const T scale = T(1) / compat::sqrt(static_cast<T>(d));
  flash_detail::launch<A, flash_detail::BackwardQuery>(
      exec, "kgpt::flash_attention::backward_query", b * h * t, d, [&](auto kernel) {
        kernel.q = q, kernel.k = k, kernel.v = v, kernel.o = o, kernel.d_o = d_o, kernel.lse = lse;
        kernel.delta = delta, kernel.dq = dq;
        kernel.heads = h, kernel.steps = t, kernel.group = group, kernel.scale = scale;
        return kernel;
      });
  flash_detail::launch<A, flash_detail::BackwardKey>(
      exec, "kgpt::flash_attention::backward_key", b * kv * t, d, [&](auto kernel) {
        kernel.q = q, kernel.k = k, kernel.v = v, kernel.d_o = d_o, kernel.lse = lse, kernel.delta = delta;
        kernel.dk = dk, kernel.dv = dv;
        kernel.kv_heads = kv, kernel.steps = t, kernel.group = group, kernel.scale = scale;
        return kernel;
      });
}

}  // namespace kgpt::model::ops
