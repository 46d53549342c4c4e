#pragma once
// The llama family's own ops, each forward beside its backward, built from the shared pieces (the
// head rows, rotation and RoPE tables of ops/qk_norm_rope.hpp, the row layouts of ops/launch.hpp;
// its weighted RMSNorm is ops/rmsnorm.hpp's). Shapes as everywhere: token-major (N, C) activations A,
// (C) parameters and statistics in T.
//   RoPE of the q and k columns of the QKV matrix into q_out, k_out, as Hugging Face's Llama rotates
//   (rotate_half: halves of the full head dimension, x cos + rotate_half(x) sin):
//                      z[i] = x[i] cos - x[i + D/2] sin,  z[i + D/2] = x[i + D/2] cos + x[i] sin
//                      backward: the transposed rotation, into the same columns of d_raw
//   SwiGLU:            gu = [gate | up] (N, 2F);  act = silu(gate) up,  silu(g) = g sigmoid(g)
//                      d_gate = d_act up silu'(g),  silu'(g) = s (1 + g (1 - s));  d_up = d_act silu(g)

#include "core/bf16.hpp"
#include "core/kernel.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/ops/launch.hpp"
#include "model/ops/qk_norm_rope.hpp"

namespace kgpt::model::llama {

using ops::Team;

namespace {  // kernels: internal linkage, see core/kernel.hpp

namespace detail {

// The rotation (rotate_pair) of every head row of q and k, P pairs a lane: `from` and `to` give the
// rows that are read and written (the QKV matrix's columns and q_out or k_out, or the other way
// round); the sine's sign says the direction (+1: the rotation, -1: its transpose).
template <int P, class T, class From, class To>
void rope_rows(const ExecSpace& exec, const char* label, std::size_t n, const ops::QkShape& s,
               const ConstMatrix<T>& cos_table, const ConstMatrix<T>& sin_table, const From& from, const To& to,
               T sign) {
  const int half = s.dim / 2, lanes = half / P;
  const ops::RopeAngles<T> angles(cos_table, sin_table);
  ops::for_each_head_row<P>(exec, label, n, s, KOKKOS_LAMBDA(const Team& team, const ops::QkRow& q_or_k) {
    const auto* in = from(q_or_k);
    auto* out = to(q_or_k);
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, lanes), [&](const int lane) {
      const int i = lane * P;
      T x1[P], x2[P], c[P], sn[P], z1[P], z2[P];
      ops::detail::load_values<P>(in + i, x1);
      ops::detail::load_values<P>(in + i + half, x2);
      angles.template load<P>(q_or_k.t, i, c, sn);
      for (int e = 0; e < P; ++e) ops::rotate_pair(x1[e], x2[e], c[e], sign * sn[e], z1[e], z2[e]);
      ops::detail::store_values<P>(out + i, z1);
      ops::detail::store_values<P>(out + i + half, z2);
    });
  });
}

}  // namespace detail

// q (heads columns from q_offset) and k (kv heads from k_offset) of raw, rotated, into q_out and k_out.
template <class T, bool Packs = backend::Traits::packed_elementwise, class Raw, class Out>
void rope_forward(const ExecSpace& exec, const Raw& raw, const ops::QkShape& s, const ConstMatrix<T>& cos_table,
                  const ConstMatrix<T>& sin_table, const Out& q_out, const Out& k_out) {
  const auto in = row_view(raw);
  const auto q = row_view(q_out);
  const auto k = row_view(k_out);
  const auto from = KOKKOS_LAMBDA(const ops::QkRow& r) { return &in(r.token, r.in_col); };
  const auto to = KOKKOS_LAMBDA(const ops::QkRow& r) { return r.is_q ? &q(r.token, r.out_col) : &k(r.token, r.out_col); };
  constexpr int P = ops::detail::pack_of<Raw, Out>();
  if (Packs && ops::detail::qk_packs_fit<P>(s, raw, q_out, k_out, cos_table, sin_table)) {
    detail::rope_rows<P>(exec, "kgpt::llama::rope::forward", raw.extent(0), s, cos_table, sin_table, from, to, T(1));
  } else {
    detail::rope_rows<1>(exec, "kgpt::llama::rope::forward", raw.extent(0), s, cos_table, sin_table, from, to, T(1));
  }
}

// The transposed rotation of dq and dk, into the q and k columns of d_raw (its v columns untouched).
template <class T, bool Packs = backend::Traits::packed_elementwise, class DOut, class DRaw>
void rope_backward(const ExecSpace& exec, const ops::QkShape& s, const ConstMatrix<T>& cos_table,
                   const ConstMatrix<T>& sin_table, const DOut& dq, const DOut& dk, const DRaw& d_raw) {
  const auto d_q = row_view(dq);
  const auto d_k = row_view(dk);
  const auto d_in = row_view(d_raw);
  const auto from = KOKKOS_LAMBDA(const ops::QkRow& r) {
    return r.is_q ? &d_q(r.token, r.out_col) : &d_k(r.token, r.out_col);
  };
  const auto to = KOKKOS_LAMBDA(const ops::QkRow& r) { return &d_in(r.token, r.in_col); };
  constexpr int P = ops::detail::pack_of<DOut, DRaw>();
  if (Packs && ops::detail::qk_packs_fit<P>(s, d_raw, dq, dk, cos_table, sin_table)) {
    detail::rope_rows<P>(exec, "kgpt::llama::rope::backward", d_raw.extent(0), s, cos_table, sin_table, from, to, T(-1));
  } else {
    detail::rope_rows<1>(exec, "kgpt::llama::rope::backward", d_raw.extent(0), s, cos_table, sin_table, from, to, T(-1));
  }
}

template <class T, class GU, class Act>
void swiglu_forward(const ExecSpace& exec, const GU& gu, const Act& act) {
  using A = typename Act::value_type;
  const std::size_t f = act.extent(1);
  ops::for_each_element(exec, "kgpt::llama::swiglu::forward", act.extent(0), f,
                        KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
                          const T g = T(gu(i, j)), u = T(gu(i, f + j));
                          act(i, j) = store<A>(g / (T(1) + compat::exp(-g)) * u);
                        });
}

// d_gu = [d_gate | d_up] from d_act (may not alias d_gu).
template <class T, class GU, class DAct, class DGU>
void swiglu_backward(const ExecSpace& exec, const GU& gu, const DAct& d_act, const DGU& d_gu) {
  using A = typename DGU::value_type;
  const std::size_t f = d_act.extent(1);
  ops::for_each_element(exec, "kgpt::llama::swiglu::backward", d_act.extent(0), f,
                        KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
                          const T g = T(gu(i, j)), u = T(gu(i, f + j)), d = T(d_act(i, j));
                          const T s = T(1) / (T(1) + compat::exp(-g));
                          d_gu(i, j) = store<A>(d * u * s * (T(1) + g * (T(1) - s)));
                          d_gu(i, f + j) = store<A>(d * g * s);
                        });
}

}  // namespace

// SwiGLU as the activation of the shared MLP sublayer (model/layers/mlp.hpp).
template <class T>
struct SwiGlu {
  template <class GU, class Act>
  void forward(const ExecSpace& exec, const GU& gu, const Act& act) const {
    swiglu_forward<T>(exec, gu, act);
  }
  template <class GU, class DAct, class DGU>
  void backward(const ExecSpace& exec, const GU& gu, const DAct& d_act, const DGU& d_gu) const {
    swiglu_backward<T>(exec, gu, d_act, d_gu);
  }
};

}  // namespace kgpt::model::llama
