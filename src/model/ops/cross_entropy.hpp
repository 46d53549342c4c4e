#pragma once
// The tied output head and the loss:
//   z = x W^T (N, V);  z' = cap * tanh(z / cap) (cap = 0: z' = z);  loss(n) = logsumexp(z'(n)) - z'(n, y(n))
//   mean loss = sum(loss) / N, accumulated in double.
// Backward with upstream scale g (the caller's grad_scale; the 1/N of the mean is applied here):
//   dz'(n, v) = g / N * (softmax(z'(n))(v) - [v = y(n)]);  dz = dz' * (1 - (z'/cap)^2)
//   dx = dz W (overwritten);  dW += dz^T x (accumulated: a tied W also gets the embedding's gradient).
// x (N, C); W (V, C) (the tied embedding or the head); targets (B, T) with N = B*T; logits (N, V) is a workspace that holds z' after
// the forward and dz after the backward; lse (N) and losses (N) are kept by the forward.

#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/gemm.hpp"

namespace kgpt::model::ops {

template <class T>
double cross_entropy_forward(const ExecSpace& exec, const ConstMatrix<T>& x, const ConstMatrix<T>& w,
                             const ConstTokenMatrix& targets, T softcap, const Matrix<T>& logits, const Vector<T>& lse,
                             const Vector<T>& losses, GemmPrecision precision = GemmPrecision::fp32) {
  gemm(exec, Op::none, Op::transpose, T(1), x, w, T(0), logits, precision);
  const int n = static_cast<int>(logits.extent(0)), v = static_cast<int>(logits.extent(1));
  const int seq = static_cast<int>(targets.extent(1));
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::cross_entropy::forward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        if (softcap > T(0)) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, v),
                               [&](const int j) { logits(row, j) = softcap * compat::tanh(logits(row, j) / softcap); });
          team.team_barrier();
        }
        T row_max = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, v),
            [&](const int j, T& m) { m = (j == 0 || logits(row, j) > m) ? logits(row, j) : m; }, Kokkos::Max<T>(row_max));
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, v),
            [&](const int j, T& acc) { acc += compat::exp(logits(row, j) - row_max); }, sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          const T log_sum = row_max + compat::log(sum);
          lse(row) = log_sum;
          losses(row) = log_sum - logits(row, targets(row / seq, row % seq));
        });
      });
  double total = 0;
  Kokkos::parallel_reduce(
      "kgpt::cross_entropy::mean", Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
      KOKKOS_LAMBDA(const int row, double& acc) { acc += static_cast<double>(losses(row)); }, total);
  return total / n;
}

template <class T>
void cross_entropy_backward(const ExecSpace& exec, const ConstMatrix<T>& x, const ConstMatrix<T>& w,
                            const ConstTokenMatrix& targets, T softcap, const Matrix<T>& logits,
                            const ConstVector<T>& lse, T grad_scale, const Matrix<T>& dx, const Matrix<T>& dw,
                            GemmPrecision precision = GemmPrecision::fp32) {
  const int n = static_cast<int>(logits.extent(0)), v = static_cast<int>(logits.extent(1));
  const int seq = static_cast<int>(targets.extent(1));
  const T scale = grad_scale / static_cast<T>(n);
  Kokkos::parallel_for(
      "kgpt::cross_entropy::backward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, v}),
      KOKKOS_LAMBDA(const int row, const int j) {
        const T z = logits(row, j);
        T grad = scale * (compat::exp(z - lse(row)) - (j == targets(row / seq, row % seq) ? T(1) : T(0)));
        if (softcap > T(0)) {
          const T ratio = z / softcap;
          grad *= T(1) - ratio * ratio;
        }
        logits(row, j) = grad;
      });
  gemm(exec, Op::none, Op::none, T(1), ConstMatrix<T>(logits), w, T(0), dx, precision);
  gemm(exec, Op::transpose, Op::none, T(1), ConstMatrix<T>(logits), x, T(1), dw, precision);
}

}  // namespace kgpt::model::ops
