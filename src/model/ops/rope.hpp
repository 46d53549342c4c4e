#pragma once
// Rotary position embedding, half-split layout over the full head dimension D (parameter-golf):
//   inv_freq(i) = base^(-2i/D), angle(t, i) = t * inv_freq(i), i < D/2
//   y[..., i] = x[..., i] cos + x[..., i + D/2] sin;  y[..., i + D/2] = -x[..., i] sin + x[..., i + D/2] cos
// The backward applies the transposed rotation. x, y, dx, dy: (B, H, T, D); cos, sin: (Tmax, D/2)
// with Tmax >= T, so one table serves every sequence length up to Tmax. y may be x (in place).

#include <cmath>

#include "core/views.hpp"

namespace kgpt::model::ops {

// Fills the tables; angles are computed in double, then rounded to T.
template <class T>
void rope_tables(const Matrix<T>& cos_table, const Matrix<T>& sin_table, double base) {
  const std::size_t t_max = cos_table.extent(0), half = cos_table.extent(1);
  auto host_cos = Kokkos::create_mirror(cos_table);
  auto host_sin = Kokkos::create_mirror(sin_table);
  for (std::size_t t = 0; t < t_max; ++t) {
    for (std::size_t i = 0; i < half; ++i) {
      const double inv_freq = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(2 * half));
      const double angle = static_cast<double>(t) * inv_freq;
      host_cos(t, i) = static_cast<T>(std::cos(angle));
      host_sin(t, i) = static_cast<T>(std::sin(angle));
    }
  }
  Kokkos::deep_copy(cos_table, host_cos);
  Kokkos::deep_copy(sin_table, host_sin);
}

namespace detail {
// sign = +1: the forward rotation; sign = -1: its transpose (the backward).
template <class T>
void rope_rotate(const ExecSpace& exec, const char* label, const ConstMatrix<T>& cos_table,
                 const ConstMatrix<T>& sin_table, const Kokkos::View<const T****, Layout, MemSpace>& x,
                 const Tensor4<T>& y, T sign) {
  const int b = static_cast<int>(x.extent(0)), h = static_cast<int>(x.extent(1));
  const int t = static_cast<int>(x.extent(2)), half = static_cast<int>(x.extent(3) / 2);
  Kokkos::parallel_for(
      label, Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<4>>(exec, {0, 0, 0, 0}, {b, h, t, half}),
      KOKKOS_LAMBDA(const int i, const int j, const int k, const int l) {
        const T c = cos_table(k, l), s = sign * sin_table(k, l);
        const T x1 = x(i, j, k, l), x2 = x(i, j, k, l + half);
        y(i, j, k, l) = x1 * c + x2 * s;
        y(i, j, k, l + half) = x2 * c - x1 * s;
      });
}
}  // namespace detail

template <class T>
void rope_forward(const ExecSpace& exec, const ConstMatrix<T>& cos_table, const ConstMatrix<T>& sin_table,
                  const ConstTensor4<T>& x, const Tensor4<T>& y) {
  detail::rope_rotate<T>(exec, "kgpt::rope::forward", cos_table, sin_table, x, y, T(1));
}

template <class T>
void rope_backward(const ExecSpace& exec, const ConstMatrix<T>& cos_table, const ConstMatrix<T>& sin_table,
                   const ConstTensor4<T>& dy, const Tensor4<T>& dx) {
  detail::rope_rotate<T>(exec, "kgpt::rope::backward", cos_table, sin_table, dy, dx, T(-1));
}

}  // namespace kgpt::model::ops
