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

namespace {  // kernels: internal linkage, see core/kernel.hpp

template <class T, class X, class Y>
void relu_squared_forward(const ExecSpace& exec, const X& x, const Y& y) {
  map_elements<T>(
      exec, "kgpt::relu_squared::forward",
      KOKKOS_LAMBDA(std::size_t, const T v) {
        const T r = v > T(0) ? v : T(0);
        return r * r;
      },
      y, x);
}

template <class T, class X, class DY, class DX>
void relu_squared_backward(const ExecSpace& exec, const X& x, const DY& dy, const DX& dx) {
  map_elements<T>(
      exec, "kgpt::relu_squared::backward",
      KOKKOS_LAMBDA(std::size_t, const T v, const T g) { return v > T(0) ? T(2) * v * g : T(0); }, dx, x, dy);
}

template <class T, class X, class Y>
void gelu_tanh_forward(const ExecSpace& exec, const X& x, const Y& y) {
  map_elements<T>(
      exec, "kgpt::gelu::forward",
      KOKKOS_LAMBDA(std::size_t, const T v) {
        const T u = T(0.7978845608028654) * (v + T(0.044715) * v * v * v);
        return v / (T(1) + compat::exp(T(-2) * u));
      },
      y, x);
}

template <class T, class X, class DY, class DX>
void gelu_tanh_backward(const ExecSpace& exec, const X& x, const DY& dy, const DX& dx) {
  map_elements<T>(
      exec, "kgpt::gelu::backward",
      KOKKOS_LAMBDA(std::size_t, const T v, const T g) {
        const T s = T(1) / (T(1) + compat::exp(T(-2) * T(0.7978845608028654) * (v + T(0.044715) * v * v * v)));
        const T du = T(0.7978845608028654) * (T(1) + T(3) * T(0.044715) * v * v);
        return g * (s + T(2) * v * s * (T(1) - s) * du);
      },
      dx, x, dy);
}

}  // namespace

}  // namespace kgpt::model::ops
