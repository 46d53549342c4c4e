#pragma once
// The golf block's per-channel parameter ops. Shapes: x, x0, y (N, C); s (C); mix (2, C).
//   residual_mix:  y = mix(0) * x + mix(1) * x0
//                  dx = mix(0) * dy (overwritten), dx0 += mix(1) * dy, dmix(0) += sum_n x dy, dmix(1) += sum_n x0 dy
//   scaled_add:    x += s * y (in place: a residual add with a per-channel scale)
//                  dy = s * dx (overwritten), ds += sum_n y dx; dx itself flows on unchanged
//   add_into:      y += x (two gradient paths meeting)
//   bias:          y += bias; dbias += sum_n dy (a linear layer's bias)
// Channel sums run over n in order inside one thread per channel: reproducible bit for bit.

#include "core/views.hpp"

namespace kgpt::model::ops {

template <class T>
void residual_mix_forward(const ExecSpace& exec, const ConstMatrix<T>& x, const ConstMatrix<T>& x0,
                          const ConstMatrix<T>& mix, const Matrix<T>& y) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::residual_mix::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, c}),
      KOKKOS_LAMBDA(const int i, const int j) { y(i, j) = mix(0, j) * x(i, j) + mix(1, j) * x0(i, j); });
}

template <class T>
void residual_mix_backward(const ExecSpace& exec, const ConstMatrix<T>& x, const ConstMatrix<T>& x0,
                           const ConstMatrix<T>& mix, const ConstMatrix<T>& dy, const Matrix<T>& dx,
                           const Matrix<T>& dx0, const Matrix<T>& dmix) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::residual_mix::backward", Kokkos::RangePolicy<ExecSpace>(exec, 0, c), KOKKOS_LAMBDA(const int j) {
        T sum_x = 0, sum_x0 = 0;
        for (int i = 0; i < n; ++i) {
          const T g = dy(i, j);
          sum_x += x(i, j) * g;
          sum_x0 += x0(i, j) * g;
          dx(i, j) = mix(0, j) * g;
          dx0(i, j) += mix(1, j) * g;
        }
        dmix(0, j) += sum_x;
        dmix(1, j) += sum_x0;
      });
}

template <class T>
void scaled_add_forward(const ExecSpace& exec, const ConstMatrix<T>& y, const ConstVector<T>& s, const Matrix<T>& x) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::scaled_add::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, c}),
      KOKKOS_LAMBDA(const int i, const int j) { x(i, j) += s(j) * y(i, j); });
}

template <class T>
void scaled_add_backward(const ExecSpace& exec, const ConstMatrix<T>& y, const ConstVector<T>& s,
                         const ConstMatrix<T>& dx, const Matrix<T>& dy, const Vector<T>& ds) {
  const int n = static_cast<int>(y.extent(0)), c = static_cast<int>(y.extent(1));
  Kokkos::parallel_for(
      "kgpt::scaled_add::backward", Kokkos::RangePolicy<ExecSpace>(exec, 0, c), KOKKOS_LAMBDA(const int j) {
        T sum = 0;
        for (int i = 0; i < n; ++i) {
          sum += y(i, j) * dx(i, j);
          dy(i, j) = s(j) * dx(i, j);
        }
        ds(j) += sum;
      });
}

// y += x, elementwise on (N, C): joins gradients that reach one tensor by two paths.
template <class T>
void add_into(const ExecSpace& exec, const ConstMatrix<T>& x, const Matrix<T>& y) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::add_into", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, c}),
      KOKKOS_LAMBDA(const int i, const int j) { y(i, j) += x(i, j); });
}

// Bias of a linear layer: y(n, f) += bias(f); dbias(f) += sum_n dy(n, f) (row order per column).
template <class T>
void bias_forward(const ExecSpace& exec, const ConstVector<T>& bias, const Matrix<T>& y) {
  const int n = static_cast<int>(y.extent(0)), f = static_cast<int>(y.extent(1));
  Kokkos::parallel_for(
      "kgpt::bias::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, f}),
      KOKKOS_LAMBDA(const int i, const int j) { y(i, j) += bias(j); });
}

template <class T>
void bias_backward(const ExecSpace& exec, const ConstMatrix<T>& dy, const Vector<T>& dbias) {
  const int n = static_cast<int>(dy.extent(0)), f = static_cast<int>(dy.extent(1));
  Kokkos::parallel_for(
      "kgpt::bias::backward", Kokkos::RangePolicy<ExecSpace>(exec, 0, f), KOKKOS_LAMBDA(const int j) {
        T sum = 0;
        for (int i = 0; i < n; ++i) sum += dy(i, j);
        dbias(j) += sum;
      });
}

}  // namespace kgpt::model::ops
