#pragma once
// MLP activations, elementwise on (N, F) Views of activations (float, double or bf16), computed in T:
//   relu^2 (golf):      y = max(x, 0)^2                         dx = 2 max(x, 0) dy
//   GELU, tanh form (gpt2, PyTorch approximate='tanh'):
//                       y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
//                       dx = dy (1/2 (1 + tanh u) + x/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
//   computed as (1 + tanh u) / 2 = s = 1 / (1 + exp(-2u)) and 1 - tanh^2 u = 4 s (1 - s): one exp,
//   which libm evaluates several times faster than tanh, and no cancellation for negative x.
// dx may be dy (in place).

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::model::ops {

template <class T, class X, class Y>
void relu_squared_forward(const ExecSpace& exec, const X& x, const Y& y) {
  using A = typename Y::value_type;
  for_each_element(exec, "kgpt::relu_squared::forward", x.extent(0), x.extent(1),
                   KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
                     const T r = T(x(i, j)) > T(0) ? T(x(i, j)) : T(0);
                     y(i, j) = store<A>(r * r);
                   });
}

template <class T, class X, class DY, class DX>
void relu_squared_backward(const ExecSpace& exec, const X& x, const DY& dy, const DX& dx) {
  using A = typename DX::value_type;
  for_each_element(exec, "kgpt::relu_squared::backward", x.extent(0), x.extent(1),
                   KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
                     const T v = T(x(i, j));
                     dx(i, j) = store<A>(v > T(0) ? T(2) * v * T(dy(i, j)) : T(0));
                   });
}

template <class T, class X, class Y>
void gelu_tanh_forward(const ExecSpace& exec, const X& x, const Y& y) {
  using A = typename Y::value_type;
  for_each_element(exec, "kgpt::gelu::forward", x.extent(0), x.extent(1),
                   KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
                     const T v = T(x(i, j));
                     const T u = T(0.7978845608028654) * (v + T(0.044715) * v * v * v);
                     y(i, j) = store<A>(v / (T(1) + compat::exp(T(-2) * u)));
                   });
}

template <class T, class X, class DY, class DX>
void gelu_tanh_backward(const ExecSpace& exec, const X& x, const DY& dy, const DX& dx) {
  using A = typename DX::value_type;
  for_each_element(exec, "kgpt::gelu::backward", x.extent(0), x.extent(1),
                   KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
                     const T v = T(x(i, j));
                     const T s = T(1) / (T(1) + compat::exp(T(-2) * T(0.7978845608028654) * (v + T(0.044715) * v * v * v)));
                     const T du = T(0.7978845608028654) * (T(1) + T(3) * T(0.044715) * v * v);
                     dx(i, j) = store<A>(T(dy(i, j)) * (s + T(2) * v * s * (T(1) - s) * du));
                   });
}

}  // namespace kgpt::model::ops
