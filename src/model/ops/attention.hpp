#pragma once
// Causal scaled-dot-product attention with grouped-query attention. Query head h reads key/value
// head h / (H / KV). For each (b, h), with s = 1 / sqrt(D):
//   S = s Q K^T (T x T), P = softmax over j <= i (0 above the diagonal), O = P V
// Backward: dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = s dS K, dK += s dS^T Q, dV += P^T dO,
// where dK and dV sum over the query heads that share a key/value head.
// q, o, dq, do: (B, H, T, D); k, v, dk, dv: (B, KV, T, D); p: (B, H, T, T) probabilities, kept by the
// forward for the backward; scratch: (B, H, T, T). Products go through model::gemm_batched on
// contiguous (b, h) slices: query head h = kv * G + g (G = H / KV) reads key/value head kv, so for
// each g the slices of every (b, kv) lie at one stride apart and form one strided batch (one cuBLAS
// call on CUDA, a loop of GEMMs on the host, where one GEMM per slice measured far faster than
// batched team GEMMs). dK and dV add the query heads of a group in the order g = 0, 1, ...

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

// dS = P * (dP - rowsum(P * dP)) in place of dP, every (b, h) slice.
template <class T>
void softmax_backward(const ExecSpace& exec, const ConstTensor4<T>& p, const Tensor4<T>& grad) {
  const int b = static_cast<int>(p.extent(0)), h = static_cast<int>(p.extent(1)), t = static_cast<int>(p.extent(2));
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::attention::softmax_backward", Kokkos::TeamPolicy<ExecSpace>(exec, b * h * t, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const int i = row / (h * t), j = (row / t) % h, r = row % t;
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, r + 1), [&](const int c, T& acc) { acc += p(i, j, r, c) * grad(i, j, r, c); },
            dot);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t), [&](const int c) {
          grad(i, j, r, c) = c <= r ? p(i, j, r, c) * (grad(i, j, r, c) - dot) : T(0);
        });
      });
}

// The (b, kv * G + g) slices of a (B, H, R, C) tensor for every (b, kv), as one strided batch.
template <class T, class View>
Strided<T> group_slices(const View& x, int group, int g) {
  const std::size_t rows = x.extent(2), cols = x.extent(3);
  return Strided<T>{x.data() + static_cast<std::size_t>(g) * rows * cols, rows, cols,
                    static_cast<std::size_t>(group) * rows * cols};
}

// The (b, kv) slices of a (B, KV, R, C) tensor.
template <class T, class View>
Strided<T> kv_slices(const View& x) {
  const std::size_t rows = x.extent(2), cols = x.extent(3);
  return Strided<T>{x.data(), rows, cols, rows * cols};
}

}  // namespace detail

template <class T>
void attention_forward(const ExecSpace& exec, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
                       const ConstTensor4<T>& v, const Tensor4<T>& p, const Tensor4<T>& o,
                       GemmPrecision precision = GemmPrecision::fp32) {
  const int kv = static_cast<int>(k.extent(1)), group = static_cast<int>(q.extent(1)) / kv;
  const std::size_t count = q.extent(0) * static_cast<std::size_t>(kv);
  const T scale = T(1) / compat::sqrt(static_cast<T>(q.extent(3)));
  using detail::group_slices;
  using detail::kv_slices;
  for (int g = 0; g < group; ++g) {
    gemm_batched<T>(exec, Op::none, Op::transpose, scale, group_slices<const T>(q, group, g), kv_slices<const T>(k), T(0),
                    group_slices<T>(p, group, g), count, precision);
  }
  detail::causal_softmax<T>(exec, p);
  for (int g = 0; g < group; ++g) {
    gemm_batched<T>(exec, Op::none, Op::none, T(1), group_slices<const T>(p, group, g), kv_slices<const T>(v), T(0),
                    group_slices<T>(o, group, g), count, precision);
  }
}

template <class T>
void attention_backward(const ExecSpace& exec, const ConstTensor4<T>& q, const ConstTensor4<T>& k,
                        const ConstTensor4<T>& v, const ConstTensor4<T>& p, const ConstTensor4<T>& d_o,
                        const Tensor4<T>& dq, const Tensor4<T>& dk, const Tensor4<T>& dv, const Tensor4<T>& scratch,
                        GemmPrecision precision = GemmPrecision::fp32) {
  const int kv = static_cast<int>(k.extent(1)), group = static_cast<int>(q.extent(1)) / kv;
  const std::size_t count = q.extent(0) * static_cast<std::size_t>(kv);
  const T scale = T(1) / compat::sqrt(static_cast<T>(q.extent(3)));
  using detail::group_slices;
  using detail::kv_slices;
  Kokkos::deep_copy(exec, dk, T(0));
  Kokkos::deep_copy(exec, dv, T(0));
  for (int g = 0; g < group; ++g) {
    // dV += P^T dO and dP = dO V^T
    gemm_batched<T>(exec, Op::transpose, Op::none, T(1), group_slices<const T>(p, group, g),
                    group_slices<const T>(d_o, group, g), T(1), kv_slices<T>(dv), count, precision);
    gemm_batched<T>(exec, Op::none, Op::transpose, T(1), group_slices<const T>(d_o, group, g), kv_slices<const T>(v),
                    T(0), group_slices<T>(scratch, group, g), count, precision);
  }
  detail::softmax_backward<T>(exec, p, scratch);
  for (int g = 0; g < group; ++g) {
    // dQ = s dS K and dK += s dS^T Q
    gemm_batched<T>(exec, Op::none, Op::none, scale, group_slices<const T>(scratch, group, g), kv_slices<const T>(k),
                    T(0), group_slices<T>(dq, group, g), count, precision);
    gemm_batched<T>(exec, Op::transpose, Op::none, scale, group_slices<const T>(scratch, group, g),
                    group_slices<const T>(q, group, g), T(1), kv_slices<T>(dk), count, precision);
  }
}

}  // namespace kgpt::model::ops
