#pragma once
// The llama family's own ops, each forward beside its backward, built from the shared pieces (the
// RMSNorm row routines of ops/rmsnorm.hpp, the column sums and row layouts of ops/launch.hpp, the
// RoPE tables of ops/qk_norm_rope.hpp). Shapes as everywhere: token-major (N, C) activations A, (C)
// parameters and statistics in T.
//   weighted RMSNorm:  y = x r w,  r = 1 / sqrt(mean(x^2) + eps)
//                      g = dy w;  dx (+)= r g - r^3 x mean(g x);  dw += sum_n dy x r
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
#include "model/ops/rmsnorm.hpp"

namespace kgpt::model::llama {

using ops::Team;

namespace {  // kernels: internal linkage, see core/kernel.hpp

template <class T, class X, class W, class Y>
void rmsnorm_forward(const ExecSpace& exec, const X& x, const W& w, const Y& y, const Vector<T>& rstd, T eps) {
  using A = typename Y::value_type;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  kgpt::parallel_for(
      "kgpt::llama::rmsnorm::forward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const T r = ops::rms_row(team, c, eps, [&](const int j) { return T(x(row, j)); });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c),
                             [&](const int j) { y(row, j) = store<A>(T(x(row, j)) * r * T(w(j))); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd(row) = r; });
      });
}

// dx += (or =) the input gradient; dw += the weight's.
template <class T, class X, class W, class DY, class DX, class DW>
void rmsnorm_backward(const ExecSpace& exec, const X& x, const W& w, const ConstVector<T>& rstd, const DY& dy,
                      const DX& dx, const DW& dw, const Workspace<T>& partials, bool accumulate) {
  using A = typename DX::value_type;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  kgpt::parallel_for(
      "kgpt::llama::rmsnorm::backward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const T r = rstd(row);
        const T k = ops::rms_row_gradient(team, c, r, [&](const int j) { return T(dy(row, j)) * T(w(j)); },
                                          [&](const int j) { return T(x(row, j)); });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) {
          const T g = r * T(dy(row, j)) * T(w(j)) - k * T(x(row, j));
          dx(row, j) = store<A>(accumulate ? T(dx(row, j)) + g : g);
        });
      });
  ops::ColumnSums<T, 1>::run(
      exec, "kgpt::llama::rmsnorm::backward_weight", x.extent(0), x.extent(1), partials,
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j, T* acc) { acc[0] += T(dy(i, j)) * T(x(i, j)) * rstd(i); },
      KOKKOS_LAMBDA(const int, const std::size_t j, const T sum) { dw(j) += sum; });
}

// q (heads columns from q_offset) and k (kv heads from k_offset) of raw, rotated, into q_out and k_out.
template <class T, class Raw, class Out>
void rope_forward(const ExecSpace& exec, const Raw& raw, const ops::QkShape& s, const ConstMatrix<T>& cos_table,
                  const ConstMatrix<T>& sin_table, const Out& q_out, const Out& k_out) {
  using A = typename Out::value_type;
  const std::size_t n = raw.extent(0), q_rows = n * s.heads, rows = q_rows + n * s.kv_heads;
  const int half = s.dim / 2;
  const auto in = row_view(raw);
  const auto cos_t = row_view(cos_table);
  const auto sin_t = row_view(sin_table);
  const auto q = row_view(q_out);
  const auto k = row_view(k_out);
  kgpt::parallel_for(
      "kgpt::llama::rope::forward", ops::ShortRows::policy(exec, rows), KOKKOS_LAMBDA(const Team& team) {
        const std::size_t row = ops::ShortRows::row(team);
        if (row >= rows) return;
        const ops::QkRow q_or_k = s.row(row, q_rows);
        const bool is_q = q_or_k.is_q;
        const std::size_t token = q_or_k.token;
        const int in_col = q_or_k.in_col, out_col = q_or_k.out_col, t = q_or_k.t;
        const auto& out = is_q ? q : k;
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, half), [&](const int i) {
          const T x1 = T(in(token, in_col + i)), x2 = T(in(token, in_col + i + half));
          const T c = cos_t(t, i), sn = sin_t(t, i);
          out(token, out_col + i) = store<A>(x1 * c - x2 * sn);
          out(token, out_col + i + half) = store<A>(x2 * c + x1 * sn);
        });
      });
}

// The transposed rotation of dq and dk, into the q and k columns of d_raw (its v columns untouched).
template <class T, class DOut, class DRaw>
void rope_backward(const ExecSpace& exec, const ops::QkShape& s, const ConstMatrix<T>& cos_table,
                   const ConstMatrix<T>& sin_table, const DOut& dq, const DOut& dk, const DRaw& d_raw) {
  using A = typename DRaw::value_type;
  const std::size_t n = d_raw.extent(0), q_rows = n * s.heads, rows = q_rows + n * s.kv_heads;
  const int half = s.dim / 2;
  const auto cos_t = row_view(cos_table);
  const auto sin_t = row_view(sin_table);
  const auto d_q = row_view(dq);
  const auto d_k = row_view(dk);
  const auto d_in = row_view(d_raw);
  kgpt::parallel_for(
      "kgpt::llama::rope::backward", ops::ShortRows::policy(exec, rows), KOKKOS_LAMBDA(const Team& team) {
        const std::size_t row = ops::ShortRows::row(team);
        if (row >= rows) return;
        const ops::QkRow q_or_k = s.row(row, q_rows);
        const bool is_q = q_or_k.is_q;
        const std::size_t token = q_or_k.token;
        const int in_col = q_or_k.in_col, out_col = q_or_k.out_col, t = q_or_k.t;
        const auto& dy = is_q ? d_q : d_k;
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, half), [&](const int i) {
          const T dz1 = T(dy(token, out_col + i)), dz2 = T(dy(token, out_col + i + half));
          const T c = cos_t(t, i), sn = sin_t(t, i);
          d_in(token, in_col + i) = store<A>(c * dz1 + sn * dz2);
          d_in(token, in_col + i + half) = store<A>(c * dz2 - sn * dz1);
        });
      });
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

}  // namespace kgpt::model::llama
