#pragma once
// NorMuon's neuron-wise normalisation (modded-nanogpt's record #41, after the NorMuon paper), on a
// batch of Muon's orthogonalised matrices O, each in place:
//   one statistic per index of O's longer side (per row when O is square): the mean of O^2 over the
//   shorter side;  s = s + (1 - beta2) (mean - s)  (a running second moment, kept per neuron);
//   O /= max(sqrt(s), 1e-10), element by element along that index;
//   O *= ||O_before||_F / max(||O||_F, 1e-10)  (the update's norm as Newton-Schulz left it).
// Muon's shape scale and decoupled weight decay then apply as for Muon.

#include <cmath>

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/kernel.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "optim/rules/muon/newton_schulz.hpp"

namespace kgpt::optim {

namespace {  // kernels: internal linkage, see core/kernel.hpp

// Each matrix's Frobenius norm into norms[k], a team per matrix, summed in double.
template <class X>
void batch_norms(const ExecSpace& exec, const Orthogonalised<X>& o, double* norms) {
  using C = compute_t<X>;
  using Team = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const X* const x = o.x;
  const std::size_t size = o.m * o.n;
  kgpt::parallel_for(
      "kgpt::normuon::norms", Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(o.count), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const std::size_t k = static_cast<std::size_t>(team.league_rank());
        double sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, size),
            [&](const std::size_t e, double& acc) {
              const double v = static_cast<double>(static_cast<C>(x[k * size + e]));
              acc += v * v;
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { norms[k] = compat::sqrt(sum); });
      });
}

// The normalisation above. O is stored as Newton-Schulz left it: (m, n) with m <= n, so the longer
// side is n, the columns (the rows of a square O, as the record takes them). `second` holds each
// matrix's n statistics from second + at[k]; `norms` has room for 2 count values.
template <class T, class X>
void normalise_neurons(const ExecSpace& exec, const Orthogonalised<X>& o, T* second, const std::size_t* at,
                       double beta2, double* norms) {
  using C = compute_t<X>;
  using Team = Kokkos::TeamPolicy<ExecSpace>::member_type;
  X* const x = o.x;
  const std::size_t m = o.m, n = o.n, size = m * n, count = o.count;
  const bool by_row = m == n;
  batch_norms<X>(exec, o, norms);
  // The running second moment of each neuron, a team per (matrix, neuron).
  const T weight = T(1.0 - beta2);
  kgpt::parallel_for(
      "kgpt::normuon::second_moment", Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(count * n), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const std::size_t k = static_cast<std::size_t>(team.league_rank()) / n;
        const std::size_t s = static_cast<std::size_t>(team.league_rank()) % n;
        double sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, m),
            [&](const std::size_t t, double& acc) {
              const double v = static_cast<double>(static_cast<C>(x[k * size + (by_row ? s * n + t : t * n + s)]));
              acc += v * v;
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          T& moment = second[at[k] + s];
          moment = moment + weight * (static_cast<T>(sum / static_cast<double>(m)) - moment);
        });
      });
  kgpt::parallel_for(
      "kgpt::normuon::scale", Kokkos::RangePolicy<ExecSpace>(exec, 0, count * size), KOKKOS_LAMBDA(const std::size_t flat) {
        const std::size_t k = flat / size, e = flat % size;
        const std::size_t s = by_row ? e / n : e % n;
        const T root = compat::sqrt(second[at[k] + s]);
        const T step = T(1) / (root > T(1e-10) ? root : T(1e-10));
        x[flat] = X(static_cast<C>(x[flat]) * static_cast<C>(step));
      });
  batch_norms<X>(exec, Orthogonalised<X>{x, m, n, count, o.transposed}, norms + count);
  kgpt::parallel_for(
      "kgpt::normuon::restore_norm", Kokkos::RangePolicy<ExecSpace>(exec, 0, count * size),
      KOKKOS_LAMBDA(const std::size_t flat) {
        const std::size_t k = flat / size;
        const double after = norms[count + k] > 1e-10 ? norms[count + k] : 1e-10;
        x[flat] = X(static_cast<C>(x[flat]) * static_cast<C>(norms[k] / after));
      });
}

}  // namespace

}  // namespace kgpt::optim
