#pragma once
// Fused causal attention that keeps no T x T matrix: each query row streams over its keys with an
// online softmax (a running maximum and sum, rescaled when the maximum grows), and the backward
// recomputes each probability from the row's log-sum-exp, as FlashAttention does. Same inputs and
// results as attention.hpp, grouped-query attention included (query head h reads key/value head
// h / (H / KV)); the forward keeps lse (B, H, T) instead of P (B, H, T, T), and the backward uses
// delta (B, H, T) = rowsum(dO * O) as scratch:
//   p_ij = exp(s q_i.k_j - lse_i), dS_ij = p_ij (dO_i.v_j - delta_i),
//   dQ_i = s sum_j dS_ij k_j, dK_j = s sum_i dS_ij q_i, dV_j = sum_i p_ij dO_i,
// with dK and dV summed over the query heads that share a key/value head.
// One thread per query row (forward, dQ) and per key row (dK, dV): neighbouring threads take
// neighbouring rows of one head and read the same key or query row at the same moment, which a GPU
// serves as a broadcast from cache, so nothing is staged by hand. The head dimension D is a template
// parameter so that a row's accumulators stay in registers: D in {8, 16, 32, 64, 128}.

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"

namespace kgpt::model::ops {

// True when the fused kernels are compiled for head dimension d.
inline bool flash_attention_supports(int d) { return d == 8 || d == 16 || d == 32 || d == 64 || d == 128; }

namespace flash_detail {

template <class T, int D>
struct Forward {
  ConstTensor4<T> q, k, v;
  Tensor3<T> lse;
  Tensor4<T> o;
  int heads, steps, group;
  T scale;

  KOKKOS_INLINE_FUNCTION void operator()(const int row) const {
    const int i = row % steps, bh = row / steps, hq = bh % heads, b = bh / heads, g = hq / group;
    T qr[D], acc[D];
    for (int x = 0; x < D; ++x) qr[x] = q(b, hq, i, x) * scale;
    // Key 0 starts the running maximum m, the sum l of exp(s - m) and the weighted sum acc of values.
    T m = 0;
    for (int x = 0; x < D; ++x) m += qr[x] * k(b, g, 0, x);
    T l = 1;
    for (int x = 0; x < D; ++x) acc[x] = v(b, g, 0, x);
    for (int j = 1; j <= i; ++j) {
      T s = 0;
      for (int x = 0; x < D; ++x) s += qr[x] * k(b, g, j, x);
      if (s > m) {
        const T c = compat::exp(m - s);
        l *= c;
        for (int x = 0; x < D; ++x) acc[x] *= c;
        m = s;
      }
      const T p = compat::exp(s - m);
      l += p;
      for (int x = 0; x < D; ++x) acc[x] += p * v(b, g, j, x);
    }
    const T inverse = T(1) / l;
    for (int x = 0; x < D; ++x) o(b, hq, i, x) = acc[x] * inverse;
    lse(b, hq, i) = m + compat::log(l);
  }
};

// dQ of one query row; also writes delta_i = dO_i . O_i for the key pass.
template <class T, int D>
struct BackwardQuery {
  ConstTensor4<T> q, k, v, o, d_o;
  ConstTensor3<T> lse;
  Tensor3<T> delta;
  Tensor4<T> dq;
  int heads, steps, group;
  T scale;

  KOKKOS_INLINE_FUNCTION void operator()(const int row) const {
    const int i = row % steps, bh = row / steps, hq = bh % heads, b = bh / heads, g = hq / group;
    T qr[D], dor[D], acc[D];
    T dot = 0;
    for (int x = 0; x < D; ++x) {
      qr[x] = q(b, hq, i, x) * scale;
      dor[x] = d_o(b, hq, i, x);
      dot += dor[x] * o(b, hq, i, x);
      acc[x] = 0;
    }
    delta(b, hq, i) = dot;
    const T row_lse = lse(b, hq, i);
    for (int j = 0; j <= i; ++j) {
      T s = 0, dp = 0;
      for (int x = 0; x < D; ++x) {
        s += qr[x] * k(b, g, j, x);
        dp += dor[x] * v(b, g, j, x);
      }
      const T ds = compat::exp(s - row_lse) * (dp - dot);
      for (int x = 0; x < D; ++x) acc[x] += ds * k(b, g, j, x);
    }
    for (int x = 0; x < D; ++x) dq(b, hq, i, x) = acc[x] * scale;
  }
};

// dK and dV of one key row of key/value head g, summed over the query heads of its group.
template <class T, int D>
struct BackwardKey {
  ConstTensor4<T> q, k, v, d_o;
  ConstTensor3<T> lse, delta;
  Tensor4<T> dk, dv;
  int kv_heads, steps, group;
  T scale;

  KOKKOS_INLINE_FUNCTION void operator()(const int row) const {
    const int j = row % steps, bg = row / steps, g = bg % kv_heads, b = bg / kv_heads;
    T kr[D], vr[D], dk_acc[D], dv_acc[D];
    for (int x = 0; x < D; ++x) {
      kr[x] = k(b, g, j, x) * scale;
      vr[x] = v(b, g, j, x);
      dk_acc[x] = 0;
      dv_acc[x] = 0;
    }
    for (int hq = g * group; hq < (g + 1) * group; ++hq) {
      for (int i = j; i < steps; ++i) {
        T s = 0, dp = 0;
        for (int x = 0; x < D; ++x) {
          s += kr[x] * q(b, hq, i, x);
          dp += vr[x] * d_o(b, hq, i, x);
        }
        const T p = compat::exp(s - lse(b, hq, i));
        const T ds = p * (dp - delta(b, hq, i));
        for (int x = 0; x < D; ++x) {
          dv_acc[x] += p * d_o(b, hq, i, x);
          dk_acc[x] += ds * q(b, hq, i, x);
        }
      }
    }
    for (int x = 0; x < D; ++x) {
      dk(b, g, j, x) = dk_acc[x] * scale;
      dv(b, g, j, x) = dv_acc[x];
    }
  }
};

template <class T, template <class, int> class Kernel, class Make>
void launch(const ExecSpace& exec, const char* label, int rows, int d, const Make& make) {
  const Kokkos::RangePolicy<ExecSpace> policy(exec, 0, rows);
  switch (d) {
    case 8: Kokkos::parallel_for(label, policy, make(Kernel<T, 8>{})); return;
    case 16: Kokkos::parallel_for(label, policy, make(Kernel<T, 16>{})); return;
    case 32: Kokkos::parallel_for(label, policy, make(Kernel<T, 32>{})); return;
    case 64: Kokkos::parallel_for(label, policy, make(Kernel<T, 64>{})); return;
    case 128: Kokkos::parallel_for(label, policy, make(Kernel<T, 128>{})); return;
    default: break;
  }
  throw Error(ExitCode::failure, "fused attention: head dimension " + std::to_string(d) +
                                     " is not one of 8, 16, 32, 64, 128 (use model.attention: gemm)");
}

}  // namespace flash_detail

// q, o: (B, H, T, D); k, v: (B, KV, T, D); lse: (B, H, T), kept for the backward.
template <class T>
void flash_attention_forward(const ExecSpace& exec, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
                             const ConstTensor4<T>& v, const Tensor3<T>& lse, const Tensor4<T>& o) {
  const int b = static_cast<int>(q.extent(0)), h = static_cast<int>(q.extent(1)), t = static_cast<int>(q.extent(2));
  const int d = static_cast<int>(q.extent(3)), group = h / static_cast<int>(k.extent(1));
  const T scale = T(1) / compat::sqrt(static_cast<T>(d));
  flash_detail::launch<T, flash_detail::Forward>(exec, "kgpt::flash_attention::forward", b * h * t, d, [&](auto kernel) {
    kernel.q = q, kernel.k = k, kernel.v = v, kernel.lse = lse, kernel.o = o;
    kernel.heads = h, kernel.steps = t, kernel.group = group, kernel.scale = scale;
    return kernel;
  });
}

// d_o: (B, H, T, D) -> dq (B, H, T, D), dk, dv (B, KV, T, D), written (not added to); delta: (B, H, T) scratch.
template <class T>
void flash_attention_backward(const ExecSpace& exec, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
                              const ConstTensor4<T>& v, const ConstTensor4<T>& o, const ConstTensor3<T>& lse,
                              const ConstTensor4<T>& d_o, const Tensor3<T>& delta, const Tensor4<T>& dq,
                              const Tensor4<T>& dk, const Tensor4<T>& dv) {
  const int b = static_cast<int>(q.extent(0)), h = static_cast<int>(q.extent(1)), t = static_cast<int>(q.extent(2));
  const int d = static_cast<int>(q.extent(3)), kv = static_cast<int>(k.extent(1)), group = h / kv;
  const T scale = T(1) / compat::sqrt(static_cast<T>(d));
  flash_detail::launch<T, flash_detail::BackwardQuery>(
      exec, "kgpt::flash_attention::backward_query", b * h * t, d, [&](auto kernel) {
        kernel.q = q, kernel.k = k, kernel.v = v, kernel.o = o, kernel.d_o = d_o, kernel.lse = lse;
        kernel.delta = delta, kernel.dq = dq;
        kernel.heads = h, kernel.steps = t, kernel.group = group, kernel.scale = scale;
        return kernel;
      });
  flash_detail::launch<T, flash_detail::BackwardKey>(
      exec, "kgpt::flash_attention::backward_key", b * kv * t, d, [&](auto kernel) {
        kernel.q = q, kernel.k = k, kernel.v = v, kernel.d_o = d_o, kernel.lse = lse, kernel.delta = delta;
        kernel.dk = dk, kernel.dv = dv;
        kernel.kv_heads = kv, kernel.steps = t, kernel.group = group, kernel.scale = scale;
        return kernel;
      });
}

}  // namespace kgpt::model::ops
