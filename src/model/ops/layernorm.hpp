#pragma once
// LayerNorm with weight and bias over the last dimension (gpt2; PyTorch's biased variance):
//   xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps);  y = xhat * w + b
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w  (overwritten, or added)
//   dw += sum_n dy * xhat;  db += sum_n dy  (accumulated; column sums in a fixed order)
// x, y, dx, dy: (N, C) Views of activations; w, b, dw, db: (C) parameters; mean, rstd: (N) of T,
// kept by the forward. A team per row for the rows, two-stage column sums for dw and db.

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/ops/launch.hpp"
#include "core/kernel.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

template <class T, class X, class W, class B, class Y>
void layernorm_forward(const ExecSpace& exec, const X& x, const W& w, const B& b, const Y& y, const Vector<T>& mean,
                       const Vector<T>& rstd, T eps) {
  using A = typename Y::value_type;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  kgpt::parallel_for(
      "kgpt::layernorm::forward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        T sum = 0;
        Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, c), [&](const int j, T& acc) { acc += T(x(row, j)); }, sum);
        const T mu = sum / T(c);
        T sum_sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c),
            [&](const int j, T& acc) {
              const T d = T(x(row, j)) - mu;
              acc += d * d;
            },
            sum_sq);
        const T r = T(1) / compat::sqrt(sum_sq / T(c) + eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c),
                             [&](const int j) { y(row, j) = store<A>((T(x(row, j)) - mu) * r * T(w(j)) + T(b(j))); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          mean(row) = mu;
          rstd(row) = r;
        });
      });
}

template <class T, class X, class W, class DY, class DX, class DW>
void layernorm_backward(const ExecSpace& exec, const X& x, const W& w, const ConstVector<T>& mean,
                        const ConstVector<T>& rstd, const DY& dy, const DX& dx, const DW& dw, const DW& db,
                        const Workspace<T>& partials = {}, bool accumulate = false) {
  using A = typename DX::value_type;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  kgpt::parallel_for(
      "kgpt::layernorm::backward_input", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const T mu = mean(row), r = rstd(row);
        T sum_g = 0, sum_gx = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c), [&](const int j, T& acc) { acc += T(dy(row, j)) * T(w(j)); }, sum_g);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c),
            [&](const int j, T& acc) { acc += T(dy(row, j)) * T(w(j)) * (T(x(row, j)) - mu) * r; }, sum_gx);
        const T mean_g = sum_g / T(c), mean_gx = sum_gx / T(c);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) {
          const T xhat = (T(x(row, j)) - mu) * r;
          const T g = r * (T(dy(row, j)) * T(w(j)) - mean_g - xhat * mean_gx);
          dx(row, j) = store<A>(accumulate ? T(dx(row, j)) + g : g);
        });
      });
  ColumnSums<T, 2>::run(
      exec, "kgpt::layernorm::backward_params", x.extent(0), x.extent(1), partials,
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j, T* acc) {
        const T g = T(dy(i, j));
        acc[0] += g * (T(x(i, j)) - mean(i)) * rstd(i);
        acc[1] += g;
      },
      KOKKOS_LAMBDA(const int k, const std::size_t j, const T sum) {
        if (k == 0) dw(j) += sum;
        else db(j) += sum;
      });
}

}  // namespace

}  // namespace kgpt::model::ops
