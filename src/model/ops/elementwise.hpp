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
// The elementwise outputs and the column sums of each backward come from one pass over the data,
// which on a GPU reads and writes 16 bytes per thread (a term written once for W columns); the sums
// are added in a fixed order (stages, launch.hpp), so they are reproducible.

#include <type_traits>

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

template <class V>
using ConstRows = RowView<const std::remove_const_t<typename V::value_type>>;
template <class V>
using Rows = RowView<typename V::value_type>;

// The columns of 16 bytes of the narrowest of the arrays: the pack width of their column sums.
template <class... Views>
constexpr int pack_width() {
  return detail::pack_of<Views...>();
}

// The terms of the backwards below, each written once for W consecutive columns of a row (a GPU's
// 16-byte packs; one column on the host): ColumnSums::run_packed.
// The backward of out = base + s * y (scaled add) and of x_in = x_prev + w * src (skip): the
// gradient reaching y or src is s * dx (written), and s's gradient sums y dx over the rows. s is a
// vector of one value per column, or with Scalar one value for all (BigramHash's scale).
template <class T, class Y, class DX, class DY, class S, bool Scalar = false>
struct ScaledTerms {
  ConstRows<Y> y;
  ConstRows<DX> dx;
  Rows<DY> dy;
  const S* s;
  template <int W>
  KOKKOS_INLINE_FUNCTION void terms(std::size_t i, std::size_t j, T (*acc)[W]) const {
    T g[W], v[W], out[W];
    detail::load_values<W>(&dx(i, j), g);
    detail::load_values<W>(&y(i, j), v);
    for (int w = 0; w < W; ++w) {
      out[w] = T(s[Scalar ? 0 : j + w]) * g[w];
      acc[0][w] += v[w] * g[w];
    }
    detail::store_values<W>(&dy(i, j), out);
  }
  template <int W>
  bool packs_fit() const {
    return detail::packs_aligned<W>(y) && detail::packs_aligned<W>(dx) && detail::packs_aligned<W>(dy);
  }
};

template <class T, class X, class DX, class Mix>
struct MixTerms {
  ConstRows<X> x_in, x0;
  Rows<DX> dx, dx0;
  const Mix* mix0;
  const Mix* mix1;
  template <int W>
  KOKKOS_INLINE_FUNCTION void terms(std::size_t i, std::size_t j, T (*acc)[W]) const {
    T g[W], a[W], b[W], d0[W], out[W];
    detail::load_values<W>(&dx(i, j), g);
    detail::load_values<W>(&x_in(i, j), a);
    detail::load_values<W>(&x0(i, j), b);
    detail::load_values<W>(&dx0(i, j), d0);
    for (int w = 0; w < W; ++w) {
      acc[0][w] += a[w] * g[w];
      acc[1][w] += b[w] * g[w];
      d0[w] = d0[w] + T(mix1[j + w]) * g[w];
      out[w] = T(mix0[j + w]) * g[w];
    }
    detail::store_values<W>(&dx0(i, j), d0);
    detail::store_values<W>(&dx(i, j), out);
  }
  template <int W>
  bool packs_fit() const {
    return detail::packs_aligned<W>(x_in) && detail::packs_aligned<W>(x0) && detail::packs_aligned<W>(dx) &&
           detail::packs_aligned<W>(dx0);
  }
};

template <class T, class DY>
struct BiasTerms {
  ConstRows<DY> dy;
  template <int W>
  KOKKOS_INLINE_FUNCTION void terms(std::size_t i, std::size_t j, T (*acc)[W]) const {
    T g[W];
    detail::load_values<W>(&dy(i, j), g);
    for (int w = 0; w < W; ++w) acc[0][w] += g[w];
  }
  template <int W>
  bool packs_fit() const {
    return detail::packs_aligned<W>(dy);
  }
};

// A norm's parameter gradients (norms in rmsnorm.hpp, layernorm.hpp): the weight's dy xhat, with
// xhat = (x - mean) rstd where Centered (LayerNorm, whose bias adds dy as a second sum) and x rstd
// otherwise (RMSNorm; mean is then not read).
template <class T, class X, class DY, bool Centered>
struct NormParamTerms {
  ConstRows<X> x;
  ConstRows<DY> dy;
  const T* mean;
  const T* rstd;
  template <int W>
  KOKKOS_INLINE_FUNCTION void terms(std::size_t i, std::size_t j, T (*acc)[W]) const {
    T g[W], v[W];
    detail::load_values<W>(&dy(i, j), g);
    detail::load_values<W>(&x(i, j), v);
    const T r = rstd[i];
    for (int w = 0; w < W; ++w) {
      if constexpr (Centered) {
        acc[0][w] += g[w] * (v[w] - mean[i]) * r;
        acc[1][w] += g[w];
      } else {
        acc[0][w] += g[w] * v[w] * r;
      }
    }
  }
  template <int W>
  bool packs_fit() const {
    return detail::packs_aligned<W>(x) && detail::packs_aligned<W>(dy);
  }
};

template <class T, bool Packs = backend::Traits::packed_elementwise, class Y, class S, class DX, class DY, class DS>
void scaled_add_backward(const ExecSpace& exec, const Y& y, const S& s, const DX& dx, const DY& dy, const DS& ds,
                         const Workspace<T>& partials = {}) {
  using Terms = ScaledTerms<T, Y, DX, DY, std::remove_const_t<typename S::value_type>>;
  const Terms terms{ConstRows<Y>(y), ConstRows<DX>(dx), Rows<DY>(dy), s.data()};
  ColumnSums<T, 1>::template run_packed<pack_width<Y, DX, DY>(), Packs>(
      exec, "kgpt::scaled_add::backward", y.extent(0), y.extent(1), partials, terms,
      KOKKOS_LAMBDA(const int, const std::size_t j, const T sum) { ds(j) += sum; });
}

template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class Mix, class DX, class DMix>
void mix_backward(const ExecSpace& exec, const X& x_in, const X& x0, const Mix& mix, const DX& dx, const DX& dx0,
                  const DMix& dmix, const Workspace<T>& partials = {}) {
  using Terms = MixTerms<T, X, DX, std::remove_const_t<typename Mix::value_type>>;
  // The rows of mix (2, C) by pointer arithmetic: the View is in the device's memory.
  const Terms terms{ConstRows<X>(x_in), ConstRows<X>(x0), Rows<DX>(dx), Rows<DX>(dx0), mix.data(),
                    mix.data() + (mix.extent(0) > 1 ? mix.stride(0) : mix.extent(1))};
  ColumnSums<T, 2>::template run_packed<pack_width<X, DX>(), Packs>(
      exec, "kgpt::residual_mix::backward", x_in.extent(0), x_in.extent(1), partials, terms,
      KOKKOS_LAMBDA(const int k, const std::size_t j, const T sum) { dmix(k, j) += sum; });
}

template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class W, class DX, class DW>
void skip_backward(const ExecSpace& exec, const X& src, const W& w, const DX& dx, const DX& d_src, const DW& dw,
                   const Workspace<T>& partials = {}) {
  using Terms = ScaledTerms<T, X, DX, DX, std::remove_const_t<typename W::value_type>>;
  const Terms terms{ConstRows<X>(src), ConstRows<DX>(dx), Rows<DX>(d_src), w.data()};
  ColumnSums<T, 1>::template run_packed<pack_width<X, DX>(), Packs>(
      exec, "kgpt::skip::backward", src.extent(0), src.extent(1), partials, terms,
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

template <class T, bool Packs = backend::Traits::packed_elementwise, class DY, class DB>
void bias_backward(const ExecSpace& exec, const DY& dy, const DB& dbias, const Workspace<T>& partials = {}) {
  ColumnSums<T, 1>::template run_packed<pack_width<DY>(), Packs>(
      exec, "kgpt::bias::backward", dy.extent(0), dy.extent(1), partials, BiasTerms<T, DY>{ConstRows<DY>(dy)},
      KOKKOS_LAMBDA(const int, const std::size_t j, const T sum) { dbias(j) += sum; });
}

}  // namespace

}  // namespace kgpt::model::ops
