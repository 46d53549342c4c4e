#pragma once
// RMSNorm without weight over the last dimension (golf: after the embedding, before attention
// and MLP, at the end), and the passes it is fused into, each forward beside its backward:
//   y = x * r,   r = 1 / sqrt(mean(x^2) + eps)
//   dx = r * (dy - x * r^2 * mean(dy * x))
//   embedding_rmsnorm: x = table[token] (the embedding's gather), then the norm
//   mix_rmsnorm:       x_in = x_prev (+ w * skip), x_mix = mix0 * x_in + mix1 * x0, then the norm of x_mix
//   residual_rmsnorm:  x_sum = base + s * y (a scaled residual add), then the norm of x_sum
// x, y, dx, dy: (N, C) Views of activations A (float, double or bf16; any View type, subviews
// included); rstd: (N) of the compute type T, saved by the forward for the backward. Callers name T;
// the View types are deduced. The norm is taken of the value as stored (rounded to A),
// which is what the backward reads. A team per row; the rows are d_model wide. The row routines
// (rms_row, rms_row_gradient) are the formula once; every kernel here, and a family's own norms
// (a weighted RMSNorm), call them.
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

// Within a team over one row of c values: r = 1 / sqrt(mean(v^2) + eps) of v(j) = value(j), which the
// caller computes (and may store on the way).
template <class T, class Value>
KOKKOS_INLINE_FUNCTION T rms_row(const Team& team, int c, T eps, const Value& value) {
  T sum_sq = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, c),
      [&](const int j, T& acc) {
        const T v = value(j);
        acc += v * v;
      },
      sum_sq);
  return T(1) / compat::sqrt(sum_sq / T(c) + eps);
}

// Within a team over one row: the coefficient k of the norm's backward, dx = r g - k x, for the
// gradient g(j) reaching the normalised values and the row's inputs x(j): k = r^3 mean(g x).
template <class T, class G, class X>
KOKKOS_INLINE_FUNCTION T rms_row_gradient(const Team& team, int c, T r, const G& g, const X& x) {
  T dot = 0;
  Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, c), [&](const int j, T& acc) { acc += g(j) * x(j); }, dot);
  return r * r * r * dot / T(c);
}

namespace {  // kernels: internal linkage, see core/kernel.hpp

namespace detail {

// r of a row read pack by pack: value(j, v) puts the P values from column j into v (and may store
// what it computed on the way).
template <int P, class T, class PackValue>
KOKKOS_INLINE_FUNCTION T rms_row_packed(const Team& team, int c, T eps, const PackValue& value) {
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

// to[j] = from[j] * r over a row of c values, pack by pack (a row's lanes).
template <int P, class T, class From, class To>
KOKKOS_INLINE_FUNCTION void scale_row_packed(const Team& team, int c, T r, const From* from, To* to) {
  Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, c / P), [&](const int p) {
    T v[P];
    load_pack<P>(from + p * P, v);
    for (int e = 0; e < P; ++e) v[e] *= r;
    store_pack<P>(to + p * P, v);
  });
}

template <class T, class X, class Y>
void rmsnorm_forward_packed(const ExecSpace& exec, const X& x, const Y& y, const Vector<T>& rstd, T eps) {
  constexpr int P = pack_of<X, Y>();
  using Rows = PackedRows<P>;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  const int per_team = Rows::rows_per_team(c);
  const auto in = row_view(x);
  const auto out = row_view(y);
  T* const r_out = rstd.data();
  kgpt::parallel_for(
      "kgpt::rmsnorm::forward", Rows::policy(exec, n, c), KOKKOS_LAMBDA(const Team& team) {
        const int row = Rows::row(team, per_team);
        if (row >= n) return;
        const T r = rms_row_packed<P>(team, c, eps, [&](const int j, T* v) { load_pack<P>(&in(row, j), v); });
        scale_row_packed<P>(team, c, r, &in(row, 0), &out(row, 0));
        Kokkos::single(Kokkos::PerThread(team), [&]() { r_out[row] = r; });
      });
}

template <class T, class X, class DY, class DX>
void rmsnorm_backward_packed(const ExecSpace& exec, const X& x, const ConstVector<T>& rstd, const DY& dy, const DX& dx,
                             bool accumulate) {
  constexpr int P = pack_of<X, DY, DX>();
  using Rows = PackedRows<P>;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  const int per_team = Rows::rows_per_team(c);
  const auto in = row_view(x);
  const auto grad = row_view(dy);
  const auto out = row_view(dx);
  const T* const r_in = rstd.data();
  kgpt::parallel_for(
      "kgpt::rmsnorm::backward", Rows::policy(exec, n, c), KOKKOS_LAMBDA(const Team& team) {
        const int row = Rows::row(team, per_team);
        if (row >= n) return;
        const T r = r_in[row];
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, c / P),
            [&](const int p, T& acc) {
              T g[P], v[P];
              load_pack<P>(&grad(row, p * P), g);
              load_pack<P>(&in(row, p * P), v);
              for (int e = 0; e < P; ++e) acc += g[e] * v[e];
            },
            dot);
        const T k = r * r * r * dot / T(c);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, c / P), [&](const int p) {
          T g[P], v[P], result[P];
          load_pack<P>(&grad(row, p * P), g);
          load_pack<P>(&in(row, p * P), v);
          if (accumulate) {
            load_pack<P>(&out(row, p * P), result);
          }
          for (int e = 0; e < P; ++e) {
            const T d = r * g[e] - k * v[e];
            result[e] = accumulate ? result[e] + d : d;
          }
          store_pack<P>(&out(row, p * P), result);
        });
      });
}

template <int P, class T, class X, class W, class Mix, class Y>
void mix_rmsnorm_forward_packed(const ExecSpace& exec, const X& x_prev, const X& skip, const W& w, const X& x0,
                                const Mix& mix, const Y& x_in, const Y& x_mix, const Y& h, const Vector<T>& rstd,
                                T eps) {
  using A = typename Y::value_type;
  using Rows = PackedRows<P>;
  const int n = static_cast<int>(x_mix.extent(0)), c = static_cast<int>(x_mix.extent(1));
  const int per_team = Rows::rows_per_team(c);
  const bool with_skip = skip.extent(0) != 0;
  const auto prev = row_view(x_prev);
  const auto skipped = row_view(skip);
  const auto first = row_view(x0);
  const auto mixes = row_view(mix);
  const auto in_out = row_view(x_in);
  const auto mix_out = row_view(x_mix);
  const auto h_out = row_view(h);
  const auto* skip_weight = w.data();
  T* const r_out = rstd.data();
  kgpt::parallel_for(
      "kgpt::mix_rmsnorm::forward", Rows::policy(exec, n, c), KOKKOS_LAMBDA(const Team& team) {
        const int row = Rows::row(team, per_team);
        if (row >= n) return;
        // x_in and x_mix as stored (rounded to A): what the norm and the backward read.
        const T r = rms_row_packed<P>(team, c, eps, [&](const int j, T* m) {
          T in[P], m0[P], m1[P], x0v[P];
          load_pack<P>(&prev(row, j), in);
          if (with_skip) {
            T sk[P], wv[P];
            load_pack<P>(&skipped(row, j), sk);
            load_pack<P>(skip_weight + j, wv);
            for (int e = 0; e < P; ++e) in[e] = T(store<A>(in[e] + wv[e] * sk[e]));
            store_pack<P>(&in_out(row, j), in);
          }
          load_pack<P>(&mixes(0, j), m0);
          load_pack<P>(&mixes(1, j), m1);
          load_pack<P>(&first(row, j), x0v);
          for (int e = 0; e < P; ++e) m[e] = T(store<A>(m0[e] * in[e] + m1[e] * x0v[e]));
          store_pack<P>(&mix_out(row, j), m);
        });
        scale_row_packed<P>(team, c, r, &mix_out(row, 0), &h_out(row, 0));
        Kokkos::single(Kokkos::PerThread(team), [&]() { r_out[row] = r; });
      });
}

template <int P, class T, class X, class S, class Y>
void residual_rmsnorm_forward_packed(const ExecSpace& exec, const X& base, const S& s, const X& y, const Y& x_sum,
                                     const Y& h, const Vector<T>& rstd, T eps) {
  using A = typename Y::value_type;
  using Rows = PackedRows<P>;
  const int n = static_cast<int>(x_sum.extent(0)), c = static_cast<int>(x_sum.extent(1));
  const int per_team = Rows::rows_per_team(c);
  const auto b = row_view(base);
  const auto added = row_view(y);
  const auto sum_out = row_view(x_sum);
  const auto h_out = row_view(h);
  const auto* scale = s.data();
  T* const r_out = rstd.data();
  kgpt::parallel_for(
      "kgpt::residual_rmsnorm::forward", Rows::policy(exec, n, c), KOKKOS_LAMBDA(const Team& team) {
        const int row = Rows::row(team, per_team);
        if (row >= n) return;
        // x_sum as stored (rounded to A): what the norm and the backward read.
        const T r = rms_row_packed<P>(team, c, eps, [&](const int j, T* v) {
          T bv[P], sv[P], yv[P];
          load_pack<P>(&b(row, j), bv);
          load_pack<P>(scale + j, sv);
          load_pack<P>(&added(row, j), yv);
          for (int e = 0; e < P; ++e) v[e] = T(store<A>(bv[e] + sv[e] * yv[e]));
          store_pack<P>(&sum_out(row, j), v);
        });
        scale_row_packed<P>(team, c, r, &sum_out(row, 0), &h_out(row, 0));
        Kokkos::single(Kokkos::PerThread(team), [&]() { r_out[row] = r; });
      });
}

}  // namespace detail

// Packs: rows read 16 bytes at a time (a GPU) where every array allows it; else a team per row, a
// thread per element. Tests run both.
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class Y>
void rmsnorm_forward(const ExecSpace& exec, const X& x, const Y& y, const Vector<T>& rstd, T eps) {
  if (Packs && PackedRows<detail::pack_of<X, Y>()>::fits(x.extent(1), x, y)) {
    detail::rmsnorm_forward_packed(exec, x, y, rstd, eps);
    return;
  }
  using A = typename Y::value_type;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  kgpt::parallel_for(
      "kgpt::rmsnorm::forward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const T r = rms_row(team, c, eps, [&](const int j) { return T(x(row, j)); });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) { y(row, j) = store<A>(T(x(row, j)) * r); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd(row) = r; });
      });
}

// dx = rmsnorm'(x)^T dy; with `accumulate`, dx += that instead.
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class DY, class DX>
void rmsnorm_backward(const ExecSpace& exec, const X& x, const ConstVector<T>& rstd, const DY& dy, const DX& dx,
                      bool accumulate = false) {
  if (Packs && PackedRows<detail::pack_of<X, DY, DX>()>::fits(x.extent(1), x, dy, dx)) {
    detail::rmsnorm_backward_packed(exec, x, rstd, dy, dx, accumulate);
    return;
  }
  using A = typename DX::value_type;
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  kgpt::parallel_for(
      "kgpt::rmsnorm::backward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const T r = rstd(row);
        const T k = rms_row_gradient(team, c, r, [&](const int j) { return T(dy(row, j)); },
                                     [&](const int j) { return T(x(row, j)); });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) {
          const T g = r * T(dy(row, j)) - k * T(x(row, j));
          dx(row, j) = store<A>(accumulate ? T(dx(row, j)) + g : g);
        });
      });
}

// x = table[tokens] (the table in the parameters' type P), then y = rmsnorm(x); the backward gathers
// x again from the table. tokens: (B, T) with N = B * T rows.
template <class T, class Table, class Y>
void embedding_rmsnorm_forward(const ExecSpace& exec, const ConstTokenMatrix& tokens, const Table& table, const Y& y,
                               const Vector<T>& rstd, T eps) {
  using A = typename Y::value_type;
  const int n = static_cast<int>(y.extent(0)), c = static_cast<int>(y.extent(1));
  const int seq = static_cast<int>(tokens.extent(1));
  kgpt::parallel_for(
      "kgpt::embedding_rmsnorm::forward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const int token = tokens(row / seq, row % seq);
        const T r = rms_row(team, c, eps, [&](const int j) { return T(table(token, j)); });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c),
                             [&](const int j) { y(row, j) = store<A>(T(table(token, j)) * r); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd(row) = r; });
      });
}

// dtable_rows (N, C) = rmsnorm'(table[tokens])^T dy: the gradient that reaches each row's gathered
// embedding (the embedding backward then adds the rows into the table's gradient).
template <class T, class Table, class DY, class DX>
void embedding_rmsnorm_backward(const ExecSpace& exec, const ConstTokenMatrix& tokens, const Table& table,
                                const ConstVector<T>& rstd, const DY& dy, const DX& dx) {
  using A = typename DX::value_type;
  const int n = static_cast<int>(dy.extent(0)), c = static_cast<int>(dy.extent(1));
  const int seq = static_cast<int>(tokens.extent(1));
  kgpt::parallel_for(
      "kgpt::embedding_rmsnorm::backward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const int token = tokens(row / seq, row % seq);
        const T r = rstd(row);
        const T k = rms_row_gradient(team, c, r, [&](const int j) { return T(dy(row, j)); },
                                     [&](const int j) { return T(table(token, j)); });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) {
          dx(row, j) = store<A>(r * T(dy(row, j)) - k * T(table(token, j)));
        });
      });
}

// x_in = x_prev (+ w * skip when `skip` is given; x_in is then stored), x_mix = mix(0) * x_in +
// mix(1) * x0 (stored), h = rmsnorm(x_mix). mix: (2, C) and w: (C) parameters. Without a skip,
// `skip`, `w` and `x_in` are empty Views.
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class W, class Mix, class Y>
void mix_rmsnorm_forward(const ExecSpace& exec, const X& x_prev, const X& skip, const W& w, const X& x0,
                         const Mix& mix, const Y& x_in, const Y& x_mix, const Y& h, const Vector<T>& rstd, T eps) {
  using A = typename Y::value_type;
  const int n = static_cast<int>(x_mix.extent(0)), c = static_cast<int>(x_mix.extent(1));
  const bool with_skip = skip.extent(0) != 0;
  constexpr int P = detail::pack_of<X, Y, Mix>();
  using Rows = PackedRows<P>;
  if (Packs && Rows::fits(c, x_prev, x0, mix, x_mix, h) &&
      (!with_skip || (Rows::fits(c, skip, x_in) && Rows::aligned(w.data())))) {
    detail::mix_rmsnorm_forward_packed<P>(exec, x_prev, skip, w, x0, mix, x_in, x_mix, h, rstd, eps);
    return;
  }
  // Nine arrays: as RowViews and pointers, so that the kernel fits a CUDA kernel argument.
  const auto prev = row_view(x_prev);
  const auto skipped = row_view(skip);
  const auto first = row_view(x0);
  const auto mixes = row_view(mix);
  const auto in_out = row_view(x_in);
  const auto mix_out = row_view(x_mix);
  const auto h_out = row_view(h);
  const auto* skip_weight = w.data();
  T* const r_out = rstd.data();
  kgpt::parallel_for(
      "kgpt::mix_rmsnorm::forward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const T r = rms_row(team, c, eps, [&](const int j) {
          T in = T(prev(row, j));
          if (with_skip) {
            const A stored = store<A>(in + T(skip_weight[j]) * T(skipped(row, j)));
            in_out(row, j) = stored;
            in = T(stored);
          }
          const A m = store<A>(T(mixes(0, j)) * in + T(mixes(1, j)) * T(first(row, j)));
          mix_out(row, j) = m;
          return T(m);
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) { h_out(row, j) = store<A>(T(mix_out(row, j)) * r); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { r_out[row] = r; });
      });
}

// The backward of mix_rmsnorm from dh, the gradient reaching h, and dx, the gradient reaching x_mix
// by the residual path: dx += rmsnorm'(x_mix)^T dh, then dx becomes the gradient of x_in
// (mix(0) dx), dx0 += mix(1) dx, and dmix += the column sums (mix_backward, elementwise.hpp).
// x_in: what the forward mixed (x_prev, or its stored x_in where a skip was added).
template <class T, class X, class DY, class Mix, class DX, class DMix>
void mix_rmsnorm_backward(const ExecSpace& exec, const X& x_mix, const ConstVector<T>& rstd, const DY& dh,
                          const X& x_in, const X& x0, const Mix& mix, const DX& dx, const DX& dx0, const DMix& dmix,
                          const Workspace<T>& partials = {}) {
  rmsnorm_backward<T>(exec, x_mix, rstd, dh, dx, true);
  mix_backward<T>(exec, x_in, x0, mix, dx, dx0, dmix, partials);
}

// x_sum = base + s * y (stored), h = rmsnorm(x_sum). s: (C) parameters.
template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class S, class Y>
void residual_rmsnorm_forward(const ExecSpace& exec, const X& base, const S& s, const X& y, const Y& x_sum,
                              const Y& h, const Vector<T>& rstd, T eps) {
  using A = typename Y::value_type;
  const int n = static_cast<int>(x_sum.extent(0)), c = static_cast<int>(x_sum.extent(1));
  constexpr int P = detail::pack_of<X, Y, S>();
  if (Packs && PackedRows<P>::fits(c, base, y, x_sum, h) && PackedRows<P>::aligned(s.data())) {
    detail::residual_rmsnorm_forward_packed<P>(exec, base, s, y, x_sum, h, rstd, eps);
    return;
  }
  kgpt::parallel_for(
      "kgpt::residual_rmsnorm::forward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const T r = rms_row(team, c, eps, [&](const int j) {
          const A v = store<A>(T(base(row, j)) + T(s(j)) * T(y(row, j)));
          x_sum(row, j) = v;
          return T(v);
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) { h(row, j) = store<A>(T(x_sum(row, j)) * r); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd(row) = r; });
      });
}

// The backward of residual_rmsnorm from dh, the gradient reaching h, and dx, the gradient reaching
// x_sum by the residual path: dx += rmsnorm'(x_sum)^T dh (dx is then the gradient of base); dy =
// s dx (overwritten) and ds += sum_n y dx (scaled_add_backward, elementwise.hpp).
template <class T, class X, class DH, class S, class DX, class DY, class DS>
void residual_rmsnorm_backward(const ExecSpace& exec, const X& x_sum, const ConstVector<T>& rstd, const DH& dh,
                               const X& y, const S& s, const DX& dx, const DY& dy, const DS& ds,
                               const Workspace<T>& partials = {}) {
  rmsnorm_backward<T>(exec, x_sum, rstd, dh, dx, true);
  scaled_add_backward<T>(exec, y, s, dx, dy, ds, partials);
}

}  // namespace

}  // namespace kgpt::model::ops
