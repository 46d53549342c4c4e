#pragma once
// RMSNorm without weight over the last dimension (golf: after the embedding, before attention
// and MLP, at the end, and on q and k):
//   y = x * r,   r = 1 / sqrt(mean(x^2) + eps)
//   dx = r * (dy - x * r^2 * mean(dy * x))
// x, y, dx, dy: (N, C); rstd: (N), saved by the forward for the backward.
// Conventions of every op in src/model/ops: the execution space comes first; input gradients
// are overwritten; parameter gradients are accumulated (+=), so micro-steps add up.

#include "core/kokkos_compat.hpp"
#include "core/views.hpp"

namespace kgpt::model::ops {

template <class T>
void rmsnorm_forward(const ExecSpace& exec, const ConstMatrix<T>& x, const Matrix<T>& y, const Vector<T>& rstd, T eps) {
  const int n = static_cast<int>(x.extent(0));
  const int c = static_cast<int>(x.extent(1));
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::rmsnorm::forward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        T sum_sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c), [&](const int j, T& acc) { acc += x(row, j) * x(row, j); }, sum_sq);
        const T r = T(1) / compat::sqrt(sum_sq / T(c) + eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) { y(row, j) = x(row, j) * r; });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd(row) = r; });
      });
}

template <class T>
void rmsnorm_backward(const ExecSpace& exec, const ConstMatrix<T>& x, const ConstVector<T>& rstd,
                      const ConstMatrix<T>& dy, const Matrix<T>& dx) {
  const int n = static_cast<int>(x.extent(0));
  const int c = static_cast<int>(x.extent(1));
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::rmsnorm::backward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c), [&](const int j, T& acc) { acc += dy(row, j) * x(row, j); }, dot);
        const T r = rstd(row);
        const T coefficient = r * r * r * dot / T(c);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c),
                             [&](const int j) { dx(row, j) = r * dy(row, j) - coefficient * x(row, j); });
      });
}

}  // namespace kgpt::model::ops
