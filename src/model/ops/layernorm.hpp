#pragma once
// LayerNorm with weight and bias over the last dimension (gpt2; PyTorch's biased variance):
//   xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps);  y = xhat * w + b
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w  (overwritten)
//   dw += sum_n dy * xhat;  db += sum_n dy  (accumulated, summed in row order per channel)
// x, y, dx, dy: (N, C); w, b, dw, db: (C); mean, rstd: (N), kept by the forward.

#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/ops/elementwise.hpp"

namespace kgpt::model::ops {

template <class T>
void layernorm_forward(const ExecSpace& exec, const ConstMatrix<T>& x, const ConstVector<T>& w,
                       const ConstVector<T>& b, const Matrix<T>& y, const Vector<T>& mean, const Vector<T>& rstd, T eps) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::layernorm::forward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        T sum = 0;
        Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, c), [&](const int j, T& acc) { acc += x(row, j); }, sum);
        const T mu = sum / T(c);
        T sum_sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c),
            [&](const int j, T& acc) {
              const T d = x(row, j) - mu;
              acc += d * d;
            },
            sum_sq);
        const T r = T(1) / compat::sqrt(sum_sq / T(c) + eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c),
                             [&](const int j) { y(row, j) = (x(row, j) - mu) * r * w(j) + b(j); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          mean(row) = mu;
          rstd(row) = r;
        });
      });
}

template <class T>
void layernorm_backward(const ExecSpace& exec, const ConstMatrix<T>& x, const ConstVector<T>& w,
                        const ConstVector<T>& mean, const ConstVector<T>& rstd, const ConstMatrix<T>& dy,
                        const Matrix<T>& dx, const Vector<T>& dw, const Vector<T>& db) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::layernorm::backward_input", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const T mu = mean(row), r = rstd(row);
        T sum_g = 0, sum_gx = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c), [&](const int j, T& acc) { acc += dy(row, j) * w(j); }, sum_g);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c),
            [&](const int j, T& acc) { acc += dy(row, j) * w(j) * (x(row, j) - mu) * r; }, sum_gx);
        const T mean_g = sum_g / T(c), mean_gx = sum_gx / T(c);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) {
          const T xhat = (x(row, j) - mu) * r;
          dx(row, j) = r * (dy(row, j) * w(j) - mean_g - xhat * mean_gx);
        });
      });
  detail::column_sums<T>(
      exec, "kgpt::layernorm::backward_params", n, c,
      KOKKOS_LAMBDA(const int row, const int j) { return dy(row, j) * (x(row, j) - mean(row)) * rstd(row); },
      KOKKOS_LAMBDA(const int row, const int j) { return dy(row, j); }, dw, db);
}

}  // namespace kgpt::model::ops
