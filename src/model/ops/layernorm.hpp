#pragma once
// LayerNorm with weight and bias over the last dimension (gpt2; PyTorch's biased variance):
//   xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps);  y = xhat * w + b
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w  (overwritten, or added)
//   dw += sum_n dy * xhat;  db += sum_n dy  (accumulated; column sums in a fixed order)
// x, y, dx, dy: (N, C) Views of activations; w, b, dw, db: (C) parameters; mean, rstd: (N) of T,
// kept by the forward. A team per row for the rows (on a GPU a row's lanes over its 16-byte packs,
// PackedRows), two-stage column sums for dw and db.

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/ops/launch.hpp"
#include "core/kernel.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

namespace detail {

// The forward with rows read 16 bytes at a time (PackedRows): a row's lanes over its packs.
template <class T, class X, class W, class B, class Y>
void layernorm_forward_packed(const ExecSpace& exec, const X& x, const W& w, const B& b, const Y& y,
                              const Vector<T>& mean, const Vector<T>& rstd, T eps) {
  constexpr int P = pack_of<X, Y, W, B>();
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
              load_pack<P>(&in(row, p * P), v);
              for (int e = 0; e < P; ++e) acc += v[e];
            },
            sum);
        const T mu = sum / T(c);
        T sum_sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, c / P),
            [&](const int p, T& acc) {
              T v[P];
              load_pack<P>(&in(row, p * P), v);
              for (int e = 0; e < P; ++e) acc += (v[e] - mu) * (v[e] - mu);
            },
            sum_sq);
        const T r = T(1) / compat::sqrt(sum_sq / T(c) + eps);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, c / P), [&](const int p) {
          T v[P], wv[P], bv[P];
          load_pack<P>(&in(row, p * P), v);
          load_pack<P>(weight + p * P, wv);
          load_pack<P>(bias + p * P, bv);
          for (int e = 0; e < P; ++e) v[e] = (v[e] - mu) * r * wv[e] + bv[e];
          store_pack<P>(&out(row, p * P), v);
        });
        Kokkos::single(Kokkos::PerThread(team), [&]() {
          mean_out[row] = mu;
          r_out[row] = r;
        });
      });
}

// The input gradient with rows read 16 bytes at a time.
template <class T, class X, class W, class DY, class DX>
void layernorm_backward_input_packed(const ExecSpace& exec, const X& x, const W& w, const ConstVector<T>& mean,
                                     const ConstVector<T>& rstd, const DY& dy, const DX& dx, bool accumulate) {
  constexpr int P = pack_of<X, W, DY, DX>();
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
              load_pack<P>(&grad(row, p * P), g);
              load_pack<P>(weight + p * P, wv);
              for (int e = 0; e < P; ++e) acc += g[e] * wv[e];
            },
            sum_g);
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, c / P),
            [&](const int p, T& acc) {
              T g[P], wv[P], v[P];
              load_pack<P>(&grad(row, p * P), g);
              load_pack<P>(weight + p * P, wv);
              load_pack<P>(&in(row, p * P), v);
              for (int e = 0; e < P; ++e) acc += g[e] * wv[e] * (v[e] - mu) * r;
            },
            sum_gx);
        const T mean_g = sum_g / T(c), mean_gx = sum_gx / T(c);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, c / P), [&](const int p) {
          T g[P], wv[P], v[P], result[P];
          load_pack<P>(&grad(row, p * P), g);
          load_pack<P>(weight + p * P, wv);
          load_pack<P>(&in(row, p * P), v);
          if (accumulate) load_pack<P>(&out(row, p * P), result);
          for (int e = 0; e < P; ++e) {
            const T xhat = (v[e] - mu) * r;
            const T d = r * (g[e] * wv[e] - mean_g - xhat * mean_gx);
            result[e] = accumulate ? result[e] + d : d;
          }
          store_pack<P>(&out(row, p * P), result);
        });
      });
}

// The input gradient, a team per row and a thread per element.
template <class T, class X, class W, class DY, class DX>
void layernorm_backward_input_rows(const ExecSpace& exec, const X& x, const W& w, const ConstVector<T>& mean,
                                   const ConstVector<T>& rstd, const DY& dy, const DX& dx, bool accumulate) {
  using A = typename DX::value_type;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  kgpt::parallel_for(
      "kgpt::layernorm::backward_input", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const T mu = mean(row), r = rstd(row);
        T sum_g = 0, sum_gx = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c), [&](const int j, T& acc) { acc += T(dy(row, j)) * T(w(j)); }, sum_g);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c),
            [&](const int j, T& acc) { acc += T(dy(row, j)) * T(w(j)) * (T(x(row, j)) - mu) * r; }, sum_gx);
        const T mean_g = sum_g / T(c), mean_gx = sum_gx / T(c);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) {
          const T xhat = (T(x(row, j)) - mu) * r;
          const T g = r * (T(dy(row, j)) * T(w(j)) - mean_g - xhat * mean_gx);
          dx(row, j) = store<A>(accumulate ? T(dx(row, j)) + g : g);
        });
      });
}

}  // namespace detail

// Packs: rows read 16 bytes at a time (a GPU) where every array allows it; else a team per row, a
// thread per element. Tests run both.
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class W, class B, class Y>
void layernorm_forward(const ExecSpace& exec, const X& x, const W& w, const B& b, const Y& y, const Vector<T>& mean,
                       const Vector<T>& rstd, T eps) {
  using Rows = PackedRows<detail::pack_of<X, Y, W, B>()>;
  if (Packs && Rows::fits(x.extent(1), x, y) && Rows::aligned(w.data()) && Rows::aligned(b.data())) {
    detail::layernorm_forward_packed(exec, x, w, b, y, mean, rstd, eps);
    return;
  }
  using A = typename Y::value_type;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  kgpt::parallel_for(
      "kgpt::layernorm::forward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        T sum = 0;
        Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, c), [&](const int j, T& acc) { acc += T(x(row, j)); }, sum);
        const T mu = sum / T(c);
        T sum_sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c),
            [&](const int j, T& acc) {
              const T d = T(x(row, j)) - mu;
              acc += d * d;
            },
            sum_sq);
        const T r = T(1) / compat::sqrt(sum_sq / T(c) + eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c),
                             [&](const int j) { y(row, j) = store<A>((T(x(row, j)) - mu) * r * T(w(j)) + T(b(j))); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          mean(row) = mu;
          rstd(row) = r;
        });
      });
}

namespace detail {

// The weight and bias gradients' terms of a row, for W consecutive columns (ColumnSums::run_packed):
// dy (x - mean) rstd and dy.
template <class T, class X, class DY>
struct LayerNormParamTerms {
  using AX = std::remove_const_t<typename X::value_type>;
  using ADY = std::remove_const_t<typename DY::value_type>;
  RowView<const AX> x;
  RowView<const ADY> dy;
  const T* mean;
  const T* rstd;
  template <int W>
  KOKKOS_INLINE_FUNCTION void terms(std::size_t i, std::size_t j, T (*acc)[W]) const {
    T g[W], v[W];
    load_values<W>(&dy(i, j), g);
    load_values<W>(&x(i, j), v);
    const T mu = mean[i], r = rstd[i];
    for (int w = 0; w < W; ++w) {
      acc[0][w] += g[w] * (v[w] - mu) * r;
      acc[1][w] += g[w];
    }
  }
  template <int W>
  bool packs_fit() const {
    return packs_aligned<W>(x) && packs_aligned<W>(dy);
  }
};

}  // namespace detail

template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class W, class DY, class DX, class DW>
void layernorm_backward(const ExecSpace& exec, const X& x, const W& w, const ConstVector<T>& mean,
                        const ConstVector<T>& rstd, const DY& dy, const DX& dx, const DW& dw, const DW& db,
                        const Workspace<T>& partials = {}, bool accumulate = false) {
  using Rows = PackedRows<detail::pack_of<X, W, DY, DX>()>;
  if (Packs && Rows::fits(x.extent(1), x, dy, dx) && Rows::aligned(w.data())) {
    detail::layernorm_backward_input_packed(exec, x, w, mean, rstd, dy, dx, accumulate);
  } else {
    detail::layernorm_backward_input_rows(exec, x, w, mean, rstd, dy, dx, accumulate);
  }
  using Terms = detail::LayerNormParamTerms<T, X, DY>;
  const Terms terms{RowView<const typename Terms::AX>(x), RowView<const typename Terms::ADY>(dy), mean.data(), rstd.data()};
  ColumnSums<T, 2>::template run_packed<detail::pack_of<X, DY>(), Packs>(
      exec, "kgpt::layernorm::backward_params", x.extent(0), x.extent(1), partials, terms,
      KOKKOS_LAMBDA(const int k, const std::size_t j, const T sum) {
        if (k == 0) dw(j) += sum;
        else db(j) += sum;
      });
}

}  // namespace

}  // namespace kgpt::model::ops
