#pragma once
// Per-head gain on queries (golf's q_gain): y(b,h,t,d) = g(h) * x(b,h,t,d).
//   dx = g(h) * dy (overwritten);  dg(h) += sum over b, t, d of x * dy (accumulated).
// x, y, dx, dy: (B, H, T, D); g, dg: (H).

#include "core/views.hpp"

namespace kgpt::model::ops {

template <class T>
void head_gain_forward(const ExecSpace& exec, const ConstTensor4<T>& x, const ConstVector<T>& g, const Tensor4<T>& y) {
  const auto b = x.extent(0), h = x.extent(1), t = x.extent(2), d = x.extent(3);
  Kokkos::parallel_for(
      "kgpt::head_gain::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<4>>(exec, {0, 0, 0, 0}, {b, h, t, d}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j, const std::size_t k, const std::size_t l) {
        y(i, j, k, l) = g(j) * x(i, j, k, l);
      });
}

template <class T>
void head_gain_backward(const ExecSpace& exec, const ConstTensor4<T>& x, const ConstVector<T>& g,
                        const ConstTensor4<T>& dy, const Tensor4<T>& dx, const Vector<T>& dg) {
  const int b = static_cast<int>(x.extent(0)), h = static_cast<int>(x.extent(1));
  const int t = static_cast<int>(x.extent(2)), d = static_cast<int>(x.extent(3));
  Kokkos::parallel_for(
      "kgpt::head_gain::backward_input",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<4>>(exec, {0, 0, 0, 0}, {b, h, t, d}),
      KOKKOS_LAMBDA(const int i, const int j, const int k, const int l) { dx(i, j, k, l) = g(j) * dy(i, j, k, l); });
  // One team per head sums its b, t, d slice: a fixed order, so the result is reproducible.
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::head_gain::backward_gain", Kokkos::TeamPolicy<ExecSpace>(exec, h, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int j = team.league_rank();
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, b * t * d),
            [&](const int n, T& acc) {
              const int i = n / (t * d), k = (n / d) % t, l = n % d;
              acc += x(i, j, k, l) * dy(i, j, k, l);
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { dg(j) += sum; });
      });
}

}  // namespace kgpt::model::ops
