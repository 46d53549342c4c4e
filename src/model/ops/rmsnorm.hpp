#pragma once
// RMSNorm over the last dimension, with or without a weight (golf: none, after the embedding, before
// attention and MLP, at the end; llama: a weight w), and the passes it is fused into, each forward
// beside its backward:
//   y = x r (w),   r = 1 / sqrt(mean(x^2) + eps)
//   g = dy (w);  dx = r g - x r^3 mean(g x);  dw += sum_n dy x r
//   embedding_rmsnorm: x = table[token] (the embedding's gather), then the norm
//   mix_rmsnorm:       x_in = x_prev (+ w * skip), x_mix = mix0 * x_in + mix1 * x0, then the norm of x_mix
//   residual_rmsnorm:  x_sum = base + s * y (a scaled residual add), then the norm of x_sum
// x, y, dx, dy: (N, C) Views of activations A (float, double or bf16; any View type with contiguous
// rows, subviews included); rstd: (N) of the compute type T, saved by the forward for the backward.
// Callers name T; the View types are deduced. The norm is taken of the value as stored (rounded to
// A), which is what the backward reads. Every one of these runs one forward kernel and one backward
// kernel, written once with the pack width P a template parameter (PackedRows, launch.hpp): a row
// per thread, its lanes over 16-byte packs on a GPU, P = 1 on the host.
// Conventions of every op in src/model/ops: the execution space comes first; input gradients are
// overwritten (or added to, where a flag says so); parameter gradients are accumulated (+=), so
// micro-steps add up.

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/kernel.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

namespace detail {

// Within a team over one row of c values read P at a time: r = 1 / sqrt(mean(v^2) + eps), where
// value(j, v) puts the P values from column j into v (and may store what it computed on the way).
template <int P, class T, class PackValue>
KOKKOS_INLINE_FUNCTION T rms_row(const Team& team, int c, T eps, const PackValue& value) {
  T sum_sq = 0;
  Kokkos::parallel_reduce(
      Kokkos::ThreadVectorRange(team, c / P),
      [&](const int p, T& acc) {
        T v[P];
        value(p * P, v);
        for (int e = 0; e < P; ++e) acc += v[e] * v[e];
      },
      sum_sq);
  return T(1) / compat::sqrt(sum_sq / T(c) + eps);
}

// The one forward kernel: for each of n rows, r of the values that values(row, j, v) puts in v pack
// by pack (a fused op computes and stores its sum there), then h = from(row) r (w) scale, where
// from(row) points at the row as stored (rounded to A: what the backward reads) and w is read where
// Weighted; scale is golf's LN scale (1 elsewhere: r 1 is r, so the product is unchanged).
template <int P, bool Weighted, class T, class Values, class From, class H, class W>
void rmsnorm_forward_kernel(const ExecSpace& exec, const char* label, int n, int c, const Values& values,
                            const From& from, const RowView<H>& h, const W* w, T* r_out, T eps, T scale = T(1)) {
  using Rows = PackedRows<P>;
  const int per_team = Rows::rows_per_team(c);
  kgpt::parallel_for(label, Rows::policy(exec, n, c), KOKKOS_LAMBDA(const Team& team) {
    const int row = Rows::row(team, per_team);
    if (row >= n) return;
    const T r = rms_row<P>(team, c, eps, [&](const int j, T* v) { values(row, j, v); });
    const T r_scaled = r * scale;
    const auto* in = from(row);
    H* out = &h(row, 0);
    const W* weight = w;  // captured here: CUDA's lambdas may not first capture inside if constexpr
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, c / P), [&](const int p) {
      T v[P];
      load_values<P>(in + p * P, v);
      for (int e = 0; e < P; ++e) v[e] *= r_scaled;
      if constexpr (Weighted) {
        T wv[P];
        load_values<P>(weight + p * P, wv);
        for (int e = 0; e < P; ++e) v[e] *= wv[e];
      }
      store_values<P>(out + p * P, v);
    });
    Kokkos::single(Kokkos::PerThread(team), [&]() { r_out[row] = r; });
  });
}

// The one backward kernel: dx (+)= r g - k x with g = dy (w) scale and k = r^3 mean(g x), for each
// of n rows, the row's x at x_row(row).
template <int P, bool Weighted, class T, class XRow, class DY, class DX, class W>
void rmsnorm_backward_kernel(const ExecSpace& exec, const char* label, int n, int c, const XRow& x_row,
                             const RowView<DY>& dy, const RowView<DX>& dx, const W* w, const T* r_in,
                             bool accumulate, T scale = T(1)) {
  using Rows = PackedRows<P>;
  const int per_team = Rows::rows_per_team(c);
  kgpt::parallel_for(label, Rows::policy(exec, n, c), KOKKOS_LAMBDA(const Team& team) {
    const int row = Rows::row(team, per_team);
    if (row >= n) return;
    const T r = r_in[row];
    const auto* in = x_row(row);
    const DY* grad = &dy(row, 0);
    DX* out = &dx(row, 0);
    const W* weight = w;  // captured here: CUDA's lambdas may not first capture inside if constexpr
    // A lane's dy, x and (Weighted) w, read again by each pass.
    const auto load = [&](const int j, T* g, T* v, T* wv) {
      load_values<P>(grad + j, g);
      for (int e = 0; e < P; ++e) g[e] *= scale;
      load_values<P>(in + j, v);
      if constexpr (Weighted) load_values<P>(weight + j, wv);
    };
    T dot = 0;
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, c / P),
        [&](const int p, T& acc) {
          T g[P], v[P], wv[P];
          load(p * P, g, v, wv);
          for (int e = 0; e < P; ++e) {
            if constexpr (Weighted) g[e] *= wv[e];
            acc += g[e] * v[e];
          }
        },
        dot);
    const T k = r * r * r * dot / T(c);
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, c / P), [&](const int p) {
      T g[P], v[P], wv[P], result[P];
      load(p * P, g, v, wv);
      if (accumulate) load_values<P>(out + p * P, result);
      for (int e = 0; e < P; ++e) {
        T rg = r * g[e];
        if constexpr (Weighted) rg *= wv[e];
        const T d = rg - k * v[e];
        result[e] = accumulate ? result[e] + d : d;
      }
      store_values<P>(out + p * P, result);
    });
  });
}

template <int P, bool Weighted, class T, class X, class W, class Y>
void rmsnorm_forward_rows(const ExecSpace& exec, const char* label, const X& x, const W* w, const Y& y,
                          const Vector<T>& rstd, T eps) {
  const auto in = row_view(x);
  rmsnorm_forward_kernel<P, Weighted>(
      exec, label, static_cast<int>(x.extent(0)), static_cast<int>(x.extent(1)),
      KOKKOS_LAMBDA(const int row, const int j, T* v) { load_values<P>(&in(row, j), v); },
      KOKKOS_LAMBDA(const int row) { return &in(row, 0); }, row_view(y), w, rstd.data(), eps);
}

template <int P, bool Weighted, class T, class X, class W, class DY, class DX>
void rmsnorm_backward_rows(const ExecSpace& exec, const char* label, const X& x, const W* w,
                           const ConstVector<T>& rstd, const DY& dy, const DX& dx, bool accumulate, T scale = T(1)) {
  const auto in = row_view(x);
  rmsnorm_backward_kernel<P, Weighted>(
      exec, label, static_cast<int>(x.extent(0)), static_cast<int>(x.extent(1)),
      KOKKOS_LAMBDA(const int row) { return &in(row, 0); }, row_view(dy), row_view(dx), w, rstd.data(),
      accumulate, scale);
}

}  // namespace detail

// Packs: rows read 16 bytes at a time (a GPU) where every array allows it; else one element per
// lane. Tests run both.
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class Y>
void rmsnorm_forward(const ExecSpace& exec, const X& x, const Y& y, const Vector<T>& rstd, T eps) {
  constexpr int P = detail::pack_of<X, Y>();
  const T* none = nullptr;
  if (Packs && PackedRows<P>::fits(x.extent(1), x, y)) {
    detail::rmsnorm_forward_rows<P, false>(exec, "kgpt::rmsnorm::forward", x, none, y, rstd, eps);
  } else {
    detail::rmsnorm_forward_rows<1, false>(exec, "kgpt::rmsnorm::forward", x, none, y, rstd, eps);
  }
}

// dx = rmsnorm'(x)^T dy; with `accumulate`, dx += that instead. scale: of y = rmsnorm(x) scale (golf's
// LN scale), so dy is scaled by it.
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class DY, class DX>
void rmsnorm_backward(const ExecSpace& exec, const X& x, const ConstVector<T>& rstd, const DY& dy, const DX& dx,
                      bool accumulate = false, T scale = T(1)) {
  constexpr int P = detail::pack_of<X, DY, DX>();
  const T* none = nullptr;
  if (Packs && PackedRows<P>::fits(x.extent(1), x, dy, dx)) {
    detail::rmsnorm_backward_rows<P, false>(exec, "kgpt::rmsnorm::backward", x, none, rstd, dy, dx, accumulate, scale);
  } else {
    detail::rmsnorm_backward_rows<1, false>(exec, "kgpt::rmsnorm::backward", x, none, rstd, dy, dx, accumulate, scale);
  }
}

// y = rmsnorm(x) w, with a (C) weight w (llama).
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class W, class Y>
void weighted_rmsnorm_forward(const ExecSpace& exec, const X& x, const W& w, const Y& y, const Vector<T>& rstd, T eps) {
  constexpr int P = detail::pack_of<X, Y, W>();
  if (Packs && PackedRows<P>::fits(x.extent(1), x, y) && PackedRows<P>::aligned(w.data())) {
    detail::rmsnorm_forward_rows<P, true>(exec, "kgpt::weighted_rmsnorm::forward", x, w.data(), y, rstd, eps);
  } else {
    detail::rmsnorm_forward_rows<1, true>(exec, "kgpt::weighted_rmsnorm::forward", x, w.data(), y, rstd, eps);
  }
}

// dx = (or, with `accumulate`, +=) the input gradient of y = rmsnorm(x) w; dw += the weight's.
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class W, class DY, class DX, class DW>
void weighted_rmsnorm_backward(const ExecSpace& exec, const X& x, const W& w, const ConstVector<T>& rstd, const DY& dy,
                               const DX& dx, const DW& dw, const Workspace<T>& partials = {},
                               bool accumulate = false) {
  constexpr int P = detail::pack_of<X, W, DY, DX>();
  if (Packs && PackedRows<P>::fits(x.extent(1), x, dy, dx) && PackedRows<P>::aligned(w.data())) {
    detail::rmsnorm_backward_rows<P, true>(exec, "kgpt::weighted_rmsnorm::backward", x, w.data(), rstd, dy, dx,
                                           accumulate);
  } else {
    detail::rmsnorm_backward_rows<1, true>(exec, "kgpt::weighted_rmsnorm::backward", x, w.data(), rstd, dy, dx,
                                           accumulate);
  }
  using Terms = NormParamTerms<T, X, DY, false>;
  const Terms terms{ConstRows<X>(x), ConstRows<DY>(dy), nullptr, rstd.data()};
  ColumnSums<T, 1>::template run_packed<detail::pack_of<X, DY>(), Packs>(
      exec, "kgpt::weighted_rmsnorm::backward_weight", x.extent(0), x.extent(1), partials, terms,
      KOKKOS_LAMBDA(const int, const std::size_t j, const T sum) { dw(j) += sum; });
}

namespace detail {

template <int P, class T, class Table, class Y>
void embedding_rmsnorm_forward_rows(const ExecSpace& exec, const ConstTokenMatrix& tokens, const Table& table,
                                    const Y& y, const Vector<T>& rstd, T eps) {
  const int seq = static_cast<int>(tokens.extent(1));
  const auto rows = row_view(table);
  const auto from = KOKKOS_LAMBDA(const int row) { return &rows(tokens(row / seq, row % seq), 0); };
  const T* none = nullptr;
  rmsnorm_forward_kernel<P, false>(
      exec, "kgpt::embedding_rmsnorm::forward", static_cast<int>(y.extent(0)), static_cast<int>(y.extent(1)),
      KOKKOS_LAMBDA(const int row, const int j, T* v) { load_values<P>(from(row) + j, v); }, from, row_view(y), none,
      rstd.data(), eps);
}

template <int P, class T, class Table, class DY, class DX>
void embedding_rmsnorm_backward_rows(const ExecSpace& exec, const ConstTokenMatrix& tokens, const Table& table,
                                     const ConstVector<T>& rstd, const DY& dy, const DX& dx) {
  const int seq = static_cast<int>(tokens.extent(1));
  const auto rows = row_view(table);
  const T* none = nullptr;
  rmsnorm_backward_kernel<P, false>(
      exec, "kgpt::embedding_rmsnorm::backward", static_cast<int>(dy.extent(0)), static_cast<int>(dy.extent(1)),
      KOKKOS_LAMBDA(const int row) { return &rows(tokens(row / seq, row % seq), 0); }, row_view(dy), row_view(dx),
      none, rstd.data(), false);
}

}  // namespace detail

// x = table[tokens] (the table in the parameters' type), then y = rmsnorm(x); the backward gathers
// x again from the table. tokens: (B, T) with N = B * T rows.
template <class T, bool Packs = backend::Traits::packed_elementwise, class Table, class Y>
void embedding_rmsnorm_forward(const ExecSpace& exec, const ConstTokenMatrix& tokens, const Table& table, const Y& y,
                               const Vector<T>& rstd, T eps) {
  constexpr int P = detail::pack_of<Table, Y>();
  if (Packs && PackedRows<P>::fits(y.extent(1), table, y)) {
    detail::embedding_rmsnorm_forward_rows<P>(exec, tokens, table, y, rstd, eps);
  } else {
    detail::embedding_rmsnorm_forward_rows<1>(exec, tokens, table, y, rstd, eps);
  }
}

// dtable_rows (N, C) = rmsnorm'(table[tokens])^T dy: the gradient that reaches each row's gathered
// embedding (the embedding backward then adds the rows into the table's gradient).
template <class T, bool Packs = backend::Traits::packed_elementwise, class Table, class DY, class DX>
void embedding_rmsnorm_backward(const ExecSpace& exec, const ConstTokenMatrix& tokens, const Table& table,
                                const ConstVector<T>& rstd, const DY& dy, const DX& dx) {
  constexpr int P = detail::pack_of<Table, DY, DX>();
  if (Packs && PackedRows<P>::fits(dy.extent(1), table, dy, dx)) {
    detail::embedding_rmsnorm_backward_rows<P>(exec, tokens, table, rstd, dy, dx);
  } else {
    detail::embedding_rmsnorm_backward_rows<1>(exec, tokens, table, rstd, dy, dx);
  }
}

namespace detail {

template <int P, class T, class X, class W, class Mix, class Y>
void mix_rmsnorm_forward_rows(const ExecSpace& exec, const X& x_prev, const X& skip, const W& w, const X& x0,
                              const Mix& mix, const Y& x_in, const Y& x_mix, const Y& h, const Vector<T>& rstd,
                              T eps, T scale) {
  using A = typename Y::value_type;
  const bool with_skip = skip.extent(0) != 0;
  // Nine arrays: as RowViews and pointers, so that the kernel fits a CUDA kernel argument.
  const auto prev = row_view(x_prev);
  const auto skipped = row_view(skip);
  const auto first = row_view(x0);
  const auto mixes = row_view(mix);
  const auto in_out = row_view(x_in);
  const auto mix_out = row_view(x_mix);
  const auto* skip_weight = w.data();
  const T* none = nullptr;
  // x_in and x_mix as stored (rounded to A): what the norm and the backward read.
  rmsnorm_forward_kernel<P, false>(
      exec, "kgpt::mix_rmsnorm::forward", static_cast<int>(x_mix.extent(0)), static_cast<int>(x_mix.extent(1)),
      KOKKOS_LAMBDA(const int row, const int j, T* m) {
        T in[P], m0[P], m1[P], x0v[P];
        load_values<P>(&prev(row, j), in);
        if (with_skip) {
          T sk[P], wv[P];
          load_values<P>(&skipped(row, j), sk);
          load_values<P>(skip_weight + j, wv);
          for (int e = 0; e < P; ++e) in[e] = T(store<A>(in[e] + wv[e] * sk[e]));
          store_values<P>(&in_out(row, j), in);
        }
        load_values<P>(&mixes(0, j), m0);
        load_values<P>(&mixes(1, j), m1);
        load_values<P>(&first(row, j), x0v);
        for (int e = 0; e < P; ++e) m[e] = T(store<A>(m0[e] * in[e] + m1[e] * x0v[e]));
        store_values<P>(&mix_out(row, j), m);
      },
      KOKKOS_LAMBDA(const int row) { return &mix_out(row, 0); }, row_view(h), none, rstd.data(), eps, scale);
}

template <int P, class T, class X, class S, class Y>
void residual_rmsnorm_forward_rows(const ExecSpace& exec, const X& base, const S& s, const X& y, const Y& x_sum,
                                   const Y& h, const Vector<T>& rstd, T eps, T scale) {
  using A = typename Y::value_type;
  const auto b = row_view(base);
  const auto added = row_view(y);
  const auto sum_out = row_view(x_sum);
  const auto* residual_scale = s.data();
  const T* none = nullptr;
  // x_sum as stored (rounded to A): what the norm and the backward read.
  rmsnorm_forward_kernel<P, false>(
      exec, "kgpt::residual_rmsnorm::forward", static_cast<int>(x_sum.extent(0)), static_cast<int>(x_sum.extent(1)),
      KOKKOS_LAMBDA(const int row, const int j, T* v) {
        T bv[P], sv[P], yv[P];
        load_values<P>(&b(row, j), bv);
        load_values<P>(residual_scale + j, sv);
        load_values<P>(&added(row, j), yv);
        for (int e = 0; e < P; ++e) v[e] = T(store<A>(bv[e] + sv[e] * yv[e]));
        store_values<P>(&sum_out(row, j), v);
      },
      KOKKOS_LAMBDA(const int row) { return &sum_out(row, 0); }, row_view(h), none, rstd.data(), eps, scale);
}

}  // namespace detail

// x_in = x_prev (+ w * skip when `skip` is given; x_in is then stored), x_mix = mix(0) * x_in +
// mix(1) * x0 (stored), h = rmsnorm(x_mix) scale. mix: (2, C) and w: (C) parameters. Without a
// skip, `skip`, `w` and `x_in` are empty Views. scale: golf's LN scale (model.ln_scale), else 1.
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class W, class Mix, class Y>
void mix_rmsnorm_forward(const ExecSpace& exec, const X& x_prev, const X& skip, const W& w, const X& x0,
                         const Mix& mix, const Y& x_in, const Y& x_mix, const Y& h, const Vector<T>& rstd, T eps,
                         T scale = T(1)) {
  const std::size_t c = x_mix.extent(1);
  const bool with_skip = skip.extent(0) != 0;
  constexpr int P = detail::pack_of<X, Y, Mix>();
  using Rows = PackedRows<P>;
  if (Packs && Rows::fits(c, x_prev, x0, mix, x_mix, h) &&
      (!with_skip || (Rows::fits(c, skip, x_in) && Rows::aligned(w.data())))) {
    detail::mix_rmsnorm_forward_rows<P>(exec, x_prev, skip, w, x0, mix, x_in, x_mix, h, rstd, eps, scale);
  } else {
    detail::mix_rmsnorm_forward_rows<1>(exec, x_prev, skip, w, x0, mix, x_in, x_mix, h, rstd, eps, scale);
  }
}

// The backward of mix_rmsnorm from dh, the gradient reaching h, and dx, the gradient reaching x_mix
// by the residual path: dx += rmsnorm'(x_mix)^T dh, then dx becomes the gradient of x_in
// (mix(0) dx), dx0 += mix(1) dx, and dmix += the column sums (mix_backward, elementwise.hpp).
// x_in: what the forward mixed (x_prev, or its stored x_in where a skip was added); scale: the
// forward's.
template <class T, class X, class DY, class Mix, class DX, class DMix>
void mix_rmsnorm_backward(const ExecSpace& exec, const X& x_mix, const ConstVector<T>& rstd, const DY& dh,
                          const X& x_in, const X& x0, const Mix& mix, const DX& dx, const DX& dx0, const DMix& dmix,
                          const Workspace<T>& partials = {}, T scale = T(1)) {
  rmsnorm_backward<T>(exec, x_mix, rstd, dh, dx, true, scale);
  mix_backward<T>(exec, x_in, x0, mix, dx, dx0, dmix, partials);
}

// x_sum = base + s * y (stored), h = rmsnorm(x_sum) scale. s: (C) parameters; scale: golf's LN
// scale, else 1.
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class S, class Y>
void residual_rmsnorm_forward(const ExecSpace& exec, const X& base, const S& s, const X& y, const Y& x_sum,
                              const Y& h, const Vector<T>& rstd, T eps, T scale = T(1)) {
  const std::size_t c = x_sum.extent(1);
  constexpr int P = detail::pack_of<X, Y, S>();
  if (Packs && PackedRows<P>::fits(c, base, y, x_sum, h) && PackedRows<P>::aligned(s.data())) {
    detail::residual_rmsnorm_forward_rows<P>(exec, base, s, y, x_sum, h, rstd, eps, scale);
  } else {
    detail::residual_rmsnorm_forward_rows<1>(exec, base, s, y, x_sum, h, rstd, eps, scale);
  }
}

// The backward of residual_rmsnorm from dh, the gradient reaching h, and dx, the gradient reaching
// x_sum by the residual path: dx += rmsnorm'(x_sum)^T dh (dx is then the gradient of base); dy =
// s dx (overwritten) and ds += sum_n y dx (scaled_add_backward, elementwise.hpp).
template <class T, class X, class DH, class S, class DX, class DY, class DS>
void residual_rmsnorm_backward(const ExecSpace& exec, const X& x_sum, const ConstVector<T>& rstd, const DH& dh,
                               const X& y, const S& s, const DX& dx, const DY& dy, const DS& ds,
                               const Workspace<T>& partials = {}, T scale = T(1)) {
  rmsnorm_backward<T>(exec, x_sum, rstd, dh, dx, true, scale);
  scaled_add_backward<T>(exec, y, s, dx, dy, ds, partials);
}

}  // namespace

}  // namespace kgpt::model::ops
