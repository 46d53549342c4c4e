#pragma once
// LayerNorm with weight and bias over the last dimension (gpt2; PyTorch's biased variance):
//   xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps);  y = xhat * w + b
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w  (overwritten, or added)
//   dw += sum_n dy * xhat;  db += sum_n dy  (accumulated; column sums in a fixed order)
// x, y, dx, dy: (N, C) Views of activations; w, b, dw, db: (C) parameters; mean, rstd: (N) of T,
// kept by the forward. The rows' kernels are written once with the pack width P a template
// parameter (PackedRows: a row's lanes over its 16-byte packs on a GPU, one element at a time on the
// host); two-stage column sums for dw and db.

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/launch.hpp"
#include "core/kernel.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

namespace detail {

// The forward, P elements per lane (PackedRows).
template <int P, class T, class X, class W, class B, class Y>
void layernorm_forward_rows(const ExecSpace& exec, const X& x, const W& w, const B& b, const Y& y,
                            const Vector<T>& mean, const Vector<T>& rstd, T eps) {
  using Rows = PackedRows<P>;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  const int per_team = Rows::rows_per_team(c);
  const auto in = row_view(x);
  const auto out = row_view(y);
  const auto* weight = w.data();
  const auto* bias = b.data();
  T* const mean_out = mean.data();
  T* const r_out = rstd.data();
  kgpt::parallel_for(
      "kgpt::layernorm::forward", Rows::policy(exec, n, c), KOKKOS_LAMBDA(const Team& team) {
        const int row = Rows::row(team, per_team);
        if (row >= n) return;
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, c / P),
            [&](const int p, T& acc) {
              T v[P];
              load_values<P>(&in(row, p * P), v);
              for (int e = 0; e < P; ++e) acc += v[e];
            },
            sum);
        const T mu = sum / T(c);
        T sum_sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, c / P),
            [&](const int p, T& acc) {
              T v[P];
              load_values<P>(&in(row, p * P), v);
              for (int e = 0; e < P; ++e) acc += (v[e] - mu) * (v[e] - mu);
            },
            sum_sq);
        const T r = T(1) / compat::sqrt(sum_sq / T(c) + eps);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, c / P), [&](const int p) {
          T v[P], wv[P], bv[P];
          load_values<P>(&in(row, p * P), v);
          load_values<P>(weight + p * P, wv);
          load_values<P>(bias + p * P, bv);
          for (int e = 0; e < P; ++e) v[e] = (v[e] - mu) * r * wv[e] + bv[e];
          store_values<P>(&out(row, p * P), v);
        });
        Kokkos::single(Kokkos::PerThread(team), [&]() {
          mean_out[row] = mu;
          r_out[row] = r;
        });
      });
}

// The input gradient, P elements per lane.
template <int P, class T, class X, class W, class DY, class DX>
void layernorm_backward_input_rows(const ExecSpace& exec, const X& x, const W& w, const ConstVector<T>& mean,
                                   const ConstVector<T>& rstd, const DY& dy, const DX& dx, bool accumulate) {
  using Rows = PackedRows<P>;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  const int per_team = Rows::rows_per_team(c);
  const auto in = row_view(x);
  const auto grad = row_view(dy);
  const auto out = row_view(dx);
  const auto* weight = w.data();
  const T* const mean_in = mean.data();
  const T* const r_in = rstd.data();
  kgpt::parallel_for(
      "kgpt::layernorm::backward_input", Rows::policy(exec, n, c), KOKKOS_LAMBDA(const Team& team) {
        const int row = Rows::row(team, per_team);
        if (row >= n) return;
        const T mu = mean_in[row], r = r_in[row];
        T sum_g = 0, sum_gx = 0;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, c / P),
            [&](const int p, T& acc) {
              T g[P], wv[P];
              load_values<P>(&grad(row, p * P), g);
              load_values<P>(weight + p * P, wv);
              for (int e = 0; e < P; ++e) acc += g[e] * wv[e];
            },
            sum_g);
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, c / P),
            [&](const int p, T& acc) {
              T g[P], wv[P], v[P];
              load_values<P>(&grad(row, p * P), g);
              load_values<P>(weight + p * P, wv);
              load_values<P>(&in(row, p * P), v);
              for (int e = 0; e < P; ++e) acc += g[e] * wv[e] * (v[e] - mu) * r;
            },
            sum_gx);
        const T mean_g = sum_g / T(c), mean_gx = sum_gx / T(c);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, c / P), [&](const int p) {
          T g[P], wv[P], v[P], result[P];
          load_values<P>(&grad(row, p * P), g);
          load_values<P>(weight + p * P, wv);
          load_values<P>(&in(row, p * P), v);
          if (accumulate) load_values<P>(&out(row, p * P), result);
          for (int e = 0; e < P; ++e) {
            const T xhat = (v[e] - mu) * r;
            const T d = r * (g[e] * wv[e] - mean_g - xhat * mean_gx);
            result[e] = accumulate ? result[e] + d : d;
          }
          store_values<P>(&out(row, p * P), result);
        });
      });
}

}  // namespace detail

// Packs: rows read 16 bytes at a time (a GPU) where every array allows it; else one element per
// lane. Tests run both.
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class W, class B, class Y>
void layernorm_forward(const ExecSpace& exec, const X& x, const W& w, const B& b, const Y& y, const Vector<T>& mean,
                       const Vector<T>& rstd, T eps) {
  constexpr int P = detail::pack_of<X, Y, W, B>();
  using Rows = PackedRows<P>;
  if (Packs && Rows::fits(x.extent(1), x, y) && Rows::aligned(w.data()) && Rows::aligned(b.data())) {
    detail::layernorm_forward_rows<P>(exec, x, w, b, y, mean, rstd, eps);
  } else {
    detail::layernorm_forward_rows<1>(exec, x, w, b, y, mean, rstd, eps);
  }
}

template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class W, class DY, class DX, class DW>
void layernorm_backward(const ExecSpace& exec, const X& x, const W& w, const ConstVector<T>& mean,
                        const ConstVector<T>& rstd, const DY& dy, const DX& dx, const DW& dw, const DW& db,
                        const Workspace<T>& partials = {}, bool accumulate = false) {
  constexpr int P = detail::pack_of<X, W, DY, DX>();
  using Rows = PackedRows<P>;
  if (Packs && Rows::fits(x.extent(1), x, dy, dx) && Rows::aligned(w.data())) {
    detail::layernorm_backward_input_rows<P>(exec, x, w, mean, rstd, dy, dx, accumulate);
  } else {
    detail::layernorm_backward_input_rows<1>(exec, x, w, mean, rstd, dy, dx, accumulate);
  }
  using Terms = NormParamTerms<T, X, DY, true>;
  const Terms terms{ConstRows<X>(x), ConstRows<DY>(dy), mean.data(), rstd.data()};
  ColumnSums<T, 2>::template run_packed<detail::pack_of<X, DY>(), Packs>(
      exec, "kgpt::layernorm::backward_params", x.extent(0), x.extent(1), partials, terms,
      KOKKOS_LAMBDA(const int k, const std::size_t j, const T sum) {
        if (k == 0) dw(j) += sum;
        else db(j) += sum;
      });
}

}  // namespace

}  // namespace kgpt::model::ops
