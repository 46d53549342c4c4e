#pragma once
// Per-head gain on queries (golf's q_gain): y(b,h,t,d) = g(h) * x(b,h,t,d).
//   dx = g(h) * dy (overwritten);  dg(h) += sum over b, t, d of x * dy (accumulated).
// x, y, dx, dy: (B, H, T, D); g, dg: (H); slice_sums: (H, B) scratch of the backward.

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

// One team per (batch, head) slice writes dx and the slice's sum of x * dy; a second pass adds the
// B slice sums of each head in batch order. Fixed orders, so the result is reproducible; and B x H
// teams keep a GPU busy where H teams over whole heads left all but H multiprocessors idle.
template <class T>
void head_gain_backward(const ExecSpace& exec, const ConstTensor4<T>& x, const ConstVector<T>& g,
                        const ConstTensor4<T>& dy, const Tensor4<T>& dx, const Vector<T>& dg,
                        const Matrix<T>& slice_sums) {
  const int b = static_cast<int>(x.extent(0)), h = static_cast<int>(x.extent(1));
  const int t = static_cast<int>(x.extent(2)), d = static_cast<int>(x.extent(3));
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::head_gain::backward", Kokkos::TeamPolicy<ExecSpace>(exec, b * h, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int i = team.league_rank() / h, j = team.league_rank() % h;
        const T gain = g(j);
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, t * d),
            [&](const int n, T& acc) {
              const int k = n / d, l = n % d;
              const T grad = dy(i, j, k, l);
              dx(i, j, k, l) = gain * grad;
              acc += x(i, j, k, l) * grad;
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { slice_sums(j, i) = sum; });
      });
  Kokkos::parallel_for(
      "kgpt::head_gain::backward_gain", Kokkos::RangePolicy<ExecSpace>(exec, 0, h), KOKKOS_LAMBDA(const int j) {
        T sum = 0;
        for (int i = 0; i < b; ++i) sum += slice_sums(j, i);
        dg(j) += sum;
      });
}

}  // namespace kgpt::model::ops
