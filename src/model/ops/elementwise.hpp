#pragma once
// The residual-stream ops around the blocks. Shapes: x, x0, y, dx, dy (N, C) of activations; s, w,
// bias (C) and mix (2, C) parameters; partials: the workspace of the column sums (ColumnSums).
//   scaled_add:    out = base + s * y (out may be base)
//                  dy = s * dx (overwritten), ds += sum_n y dx; dx itself flows on unchanged
//   mix backward:  of x_mix = mix(0) * x_in + mix(1) * x0: dx becomes dx_in = mix(0) * dx (in place),
//                  dx0 += mix(1) * dx, dmix(0) += sum_n x_in dx, dmix(1) += sum_n x0 dx
//   skip backward: of x_in = x_prev + w * src: dsrc = w * dx (overwritten), dw += sum_n src dx; dx
//                  flows on
//   add_into:      y += x (two gradient paths meeting)
//   bias:          y += bias; dbias += sum_n dy (a linear layer's bias)
// The elementwise outputs and the column sums of each backward come from one pass over the data;
// the sums are added in a fixed order (two stages, launch.hpp), so they are reproducible.

#include "core/bf16.hpp"
#include "core/views.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

template <class T, class Base, class S, class Y, class Out>
void scaled_add_forward(const ExecSpace& exec, const Base& base, const S& s, const Y& y, const Out& out) {
  map_elements<T>(
      exec, "kgpt::scaled_add::forward", KOKKOS_LAMBDA(const std::size_t j, const T b, const T v) { return b + T(s(j)) * v; },
      out, base, y);
}

template <class T, class Y, class S, class DX, class DY, class DS>
void scaled_add_backward(const ExecSpace& exec, const Y& y, const S& s, const DX& dx, const DY& dy, const DS& ds,
                         const Workspace<T>& partials = {}) {
  using A = typename DY::value_type;
  ColumnSums<T, 1>::run(
      exec, "kgpt::scaled_add::backward", y.extent(0), y.extent(1), partials,
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j, T* acc) {
        const T g = T(dx(i, j));
        dy(i, j) = store<A>(T(s(j)) * g);
        acc[0] += T(y(i, j)) * g;
      },
      KOKKOS_LAMBDA(const int, const std::size_t j, const T sum) { ds(j) += sum; });
}

template <class T, class X, class Mix, class DX, class DMix>
void mix_backward(const ExecSpace& exec, const X& x_in, const X& x0, const Mix& mix, const DX& dx, const DX& dx0,
                  const DMix& dmix, const Workspace<T>& partials = {}) {
  using A = typename DX::value_type;
  ColumnSums<T, 2>::run(
      exec, "kgpt::residual_mix::backward", x_in.extent(0), x_in.extent(1), partials,
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j, T* acc) {
        const T g = T(dx(i, j));
        acc[0] += T(x_in(i, j)) * g;
        acc[1] += T(x0(i, j)) * g;
        dx0(i, j) = store<A>(T(dx0(i, j)) + T(mix(1, j)) * g);
        dx(i, j) = store<A>(T(mix(0, j)) * g);
      },
      KOKKOS_LAMBDA(const int k, const std::size_t j, const T sum) { dmix(k, j) += sum; });
}

template <class T, class X, class W, class DX, class DW>
void skip_backward(const ExecSpace& exec, const X& src, const W& w, const DX& dx, const DX& d_src, const DW& dw,
                   const Workspace<T>& partials = {}) {
  using A = typename DX::value_type;
  ColumnSums<T, 1>::run(
      exec, "kgpt::skip::backward", src.extent(0), src.extent(1), partials,
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j, T* acc) {
        const T g = T(dx(i, j));
        acc[0] += T(src(i, j)) * g;
        d_src(i, j) = store<A>(T(w(j)) * g);
      },
      KOKKOS_LAMBDA(const int, const std::size_t j, const T sum) { dw(j) += sum; });
}

// y += x, elementwise on (N, C): joins gradients that reach one tensor by two paths.
template <class T, class X, class Y>
void add_into(const ExecSpace& exec, const X& x, const Y& y) {
  map_elements<T>(exec, "kgpt::add_into", KOKKOS_LAMBDA(std::size_t, const T a, const T b) { return a + b; }, y, y, x);
}

template <class T, class Bias, class Y>
void bias_forward(const ExecSpace& exec, const Bias& bias, const Y& y) {
  map_elements<T>(
      exec, "kgpt::bias::forward", KOKKOS_LAMBDA(const std::size_t j, const T v) { return v + T(bias(j)); }, y, y);
}

template <class T, class DY, class DB>
void bias_backward(const ExecSpace& exec, const DY& dy, const DB& dbias, const Workspace<T>& partials = {}) {
  ColumnSums<T, 1>::run(
      exec, "kgpt::bias::backward", dy.extent(0), dy.extent(1), partials,
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j, T* acc) { acc[0] += T(dy(i, j)); },
      KOKKOS_LAMBDA(const int, const std::size_t j, const T sum) { dbias(j) += sum; });
}

}  // namespace

}  // namespace kgpt::model::ops
