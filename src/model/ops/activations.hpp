#pragma once
// MLP activations, elementwise on (N, F):
//   relu^2 (golf):      y = max(x, 0)^2                         dx = 2 max(x, 0) dy
//   GELU, tanh form (gpt2, PyTorch approximate='tanh'):
//                       y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
//                       dx = dy (1/2 (1 + tanh u) + x/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
//   computed as (1 + tanh u) / 2 = s = 1 / (1 + exp(-2u)) and 1 - tanh^2 u = 4 s (1 - s): one exp,
//   which libm evaluates several times faster than tanh, and no cancellation for negative x.

#include "core/kokkos_compat.hpp"
#include "core/views.hpp"

namespace kgpt::model::ops {

template <class T>
void relu_squared_forward(const ExecSpace& exec, const ConstMatrix<T>& x, const Matrix<T>& y) {
  const int n = static_cast<int>(x.extent(0)), f = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::relu_squared::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, f}),
      KOKKOS_LAMBDA(const int i, const int j) {
        const T r = x(i, j) > T(0) ? x(i, j) : T(0);
        y(i, j) = r * r;
      });
}

template <class T>
void relu_squared_backward(const ExecSpace& exec, const ConstMatrix<T>& x, const ConstMatrix<T>& dy, const Matrix<T>& dx) {
  const int n = static_cast<int>(x.extent(0)), f = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::relu_squared::backward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, f}),
      KOKKOS_LAMBDA(const int i, const int j) { dx(i, j) = x(i, j) > T(0) ? T(2) * x(i, j) * dy(i, j) : T(0); });
}

template <class T>
void gelu_tanh_forward(const ExecSpace& exec, const ConstMatrix<T>& x, const Matrix<T>& y) {
  const int n = static_cast<int>(x.extent(0)), f = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::gelu::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, f}),
      KOKKOS_LAMBDA(const int i, const int j) {
        const T v = x(i, j);
        const T u = T(0.7978845608028654) * (v + T(0.044715) * v * v * v);
        y(i, j) = v / (T(1) + compat::exp(T(-2) * u));
      });
}

template <class T>
void gelu_tanh_backward(const ExecSpace& exec, const ConstMatrix<T>& x, const ConstMatrix<T>& dy, const Matrix<T>& dx) {
  const int n = static_cast<int>(x.extent(0)), f = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::gelu::backward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, f}),
      KOKKOS_LAMBDA(const int i, const int j) {
        const T v = x(i, j);
        const T s = T(1) / (T(1) + compat::exp(T(-2) * T(0.7978845608028654) * (v + T(0.044715) * v * v * v)));
        const T du = T(0.7978845608028654) * (T(1) + T(3) * T(0.044715) * v * v);
        dx(i, j) = dy(i, j) * (s + T(2) * v * s * (T(1) - s) * du);
      });
}

}  // namespace kgpt::model::ops
