#pragma once
// Causal scaled-dot-product attention with grouped-query attention. Query head h reads key/value
// head h / (H / KV). For each (b, h), with s = 1 / sqrt(D):
//   S = s Q K^T (T x T), P = softmax over j <= i (0 above the diagonal), O = P V
// Backward: dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = s dS K, dK += s dS^T Q, dV += P^T dO,
// where dK and dV sum over the query heads that share a key/value head.
// q, o, dq, do: (B, H, T, D); k, v, dk, dv: (B, KV, T, D); p: (B, H, T, T) probabilities, kept by the
// forward for the backward; scratch: (T, T). Products go through model::gemm on contiguous (b, h)
// slices: one GEMM per slice measured far faster on the host than batched team GEMMs.

#include <cmath>

#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/gemm.hpp"

namespace kgpt::model::ops {

namespace detail {

// Row softmax of the causal scores in place: p(i, j) for j <= i, 0 above the diagonal.
template <class T>
void causal_softmax(const ExecSpace& exec, const Tensor4<T>& p) {
  const int b = static_cast<int>(p.extent(0)), h = static_cast<int>(p.extent(1)), t = static_cast<int>(p.extent(2));
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::attention::softmax_forward", Kokkos::TeamPolicy<ExecSpace>(exec, b * h * t, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const int i = row / (h * t), j = (row / t) % h, r = row % t;
        T row_max = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, r + 1),
            [&](const int c, T& m) { m = (c == 0 || p(i, j, r, c) > m) ? p(i, j, r, c) : m; },
            Kokkos::Max<T>(row_max));
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, r + 1),
            [&](const int c, T& acc) {
              const T e = compat::exp(p(i, j, r, c) - row_max);
              p(i, j, r, c) = e;
              acc += e;
            },
            sum);
        const T inverse = T(1) / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t),
                             [&](const int c) { p(i, j, r, c) = c <= r ? p(i, j, r, c) * inverse : T(0); });
      });
}

// dS = P * (dP - rowsum(P * dP)) in place of dP, one (T, T) slice.
template <class T>
void softmax_backward(const ExecSpace& exec, const ConstMatrix<T>& p, const Matrix<T>& grad) {
  const int t = static_cast<int>(p.extent(0));
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::attention::softmax_backward", Kokkos::TeamPolicy<ExecSpace>(exec, t, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int r = team.league_rank();
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, r + 1), [&](const int c, T& acc) { acc += p(r, c) * grad(r, c); }, dot);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t),
                             [&](const int c) { grad(r, c) = c <= r ? p(r, c) * (grad(r, c) - dot) : T(0); });
      });
}

}  // namespace detail

template <class T>
void attention_forward(const ExecSpace& exec, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
                       const ConstTensor4<T>& v, const Tensor4<T>& p, const Tensor4<T>& o) {
  const int b = static_cast<int>(q.extent(0)), h = static_cast<int>(q.extent(1));
  const int group = h / static_cast<int>(k.extent(1));
  const T scale = T(1) / compat::sqrt(static_cast<T>(q.extent(3)));
  const auto all = Kokkos::ALL();
  for (int i = 0; i < b; ++i) {
    for (int j = 0; j < h; ++j) {
      gemm(exec, Op::none, Op::transpose, scale, Kokkos::subview(q, i, j, all, all),
           Kokkos::subview(k, i, j / group, all, all), T(0), Kokkos::subview(p, i, j, all, all));
    }
  }
  detail::causal_softmax<T>(exec, p);
  for (int i = 0; i < b; ++i) {
    for (int j = 0; j < h; ++j) {
      gemm(exec, Op::none, Op::none, T(1), Kokkos::subview(ConstTensor4<T>(p), i, j, all, all),
           Kokkos::subview(v, i, j / group, all, all), T(0), Kokkos::subview(o, i, j, all, all));
    }
  }
}

template <class T>
void attention_backward(const ExecSpace& exec, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
                        const ConstTensor4<T>& v, const ConstTensor4<T>& p, const ConstTensor4<T>& d_o,
                        const Tensor4<T>& dq, const Tensor4<T>& dk, const Tensor4<T>& dv, const Matrix<T>& scratch) {
  const int b = static_cast<int>(q.extent(0)), h = static_cast<int>(q.extent(1));
  const int group = h / static_cast<int>(k.extent(1));
  const T scale = T(1) / compat::sqrt(static_cast<T>(q.extent(3)));
  const auto all = Kokkos::ALL();
  Kokkos::deep_copy(exec, dk, T(0));
  Kokkos::deep_copy(exec, dv, T(0));
  for (int i = 0; i < b; ++i) {
    for (int j = 0; j < h; ++j) {
      const auto p_ij = Kokkos::subview(p, i, j, all, all);
      const auto do_ij = Kokkos::subview(d_o, i, j, all, all);
      const auto k_ij = Kokkos::subview(k, i, j / group, all, all);
      const auto v_ij = Kokkos::subview(v, i, j / group, all, all);
      gemm(exec, Op::transpose, Op::none, T(1), p_ij, do_ij, T(1), Kokkos::subview(dv, i, j / group, all, all));
      gemm(exec, Op::none, Op::transpose, T(1), do_ij, v_ij, T(0), scratch);
      detail::softmax_backward<T>(exec, p_ij, scratch);
      gemm(exec, Op::none, Op::none, scale, ConstMatrix<T>(scratch), k_ij, T(0), Kokkos::subview(dq, i, j, all, all));
      gemm(exec, Op::transpose, Op::none, scale, ConstMatrix<T>(scratch), Kokkos::subview(q, i, j, all, all), T(1),
           Kokkos::subview(dk, i, j / group, all, all));
    }
  }
}

}  // namespace kgpt::model::ops
