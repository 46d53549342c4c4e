#pragma once
// Causal scaled-dot-product attention as GEMMs, with grouped-query attention. Query head h reads
// key/value head h / (H / KV). For each (b, h), with s = 1 / sqrt(D):
//   S = s Q K^T (T x T), P = softmax over j <= i (0 above the diagonal), O = P V
// Backward: dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = s dS K, dK = s sum_g dS_g^T Q_g,
// dV = sum_g P_g^T dO_g, the sums over the query heads g that share a key/value head, in head order.
// q, o, dq, d_o: (B, H, T, D) heads; k, v, dk, dv: (B, KV, T, D) heads (model/attention/heads.hpp: token-major
// column blocks read in place). Types: activations A (float, double or bf16); the scores S and
// their gradient are kept in compute_t<A>, the probabilities P in A (kept for the backward, one
// (B, H, T, T) array per layer), and dS in A for the products.
// Each product is one strided batch over b for one head (one cuBLASLt call on CUDA, a loop of GEMMs
// on the host, where one GEMM per slice measured far faster than batched team GEMMs).

#include <cmath>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/gemm/gemm.hpp"
#include "model/attention/heads.hpp"
#include "core/kernel.hpp"

namespace kgpt::model::ops {

namespace attention_detail {

// The (b, h) slices of one head of a Heads view, for b < B, as a strided batch.
template <class A>
Strided<const A> head(const Heads<const A>& x, int h) {
  return Strided<const A>{x.data + h * x.stride_h, static_cast<std::size_t>(x.seq), static_cast<std::size_t>(x.dim),
                          static_cast<std::size_t>(x.stride_t), static_cast<std::size_t>(x.stride_b)};
}
template <class A>
Strided<A> head(const Heads<A>& x, int h) {
  return Strided<A>{x.data + h * x.stride_h, static_cast<std::size_t>(x.seq), static_cast<std::size_t>(x.dim),
                    static_cast<std::size_t>(x.stride_t), static_cast<std::size_t>(x.stride_b)};
}

// The (b, h) slices of a (B, H, T, T) array for b < B.
template <class T>
Strided<T> scores(T* data, int h, int heads, int t) {
  const std::size_t tt = static_cast<std::size_t>(t) * t;
  return Strided<T>{data + h * tt, static_cast<std::size_t>(t), static_cast<std::size_t>(t), static_cast<std::size_t>(t),
                    static_cast<std::size_t>(heads) * tt};
}

}  // namespace attention_detail

namespace {  // kernels: internal linkage, see core/kernel.hpp

// Row softmax of the causal scores s (B, H, T, T) into p: p(i, j) for j <= i, 0 above the diagonal.
// s and p may be the same array. The pass that sums the exponentials leaves them in s, in s's type,
// so each is computed once (on the host the exponentials are most of the forward attention's time).
template <class S, class P>
void causal_softmax(const ExecSpace& exec, const Kokkos::View<S****, Layout, MemSpace>& s,
                    const Kokkos::View<P****, Layout, MemSpace>& p) {
  using T = compute_t<S>;
  const int b = static_cast<int>(p.extent(0)), h = static_cast<int>(p.extent(1)), t = static_cast<int>(p.extent(2));
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  kgpt::parallel_for(
      "kgpt::attention::softmax_forward", Kokkos::TeamPolicy<ExecSpace>(exec, b * h * t, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const int i = row / (h * t), j = (row / t) % h, r = row % t;
        T row_max = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, r + 1),
            [&](const int c, T& m) { m = (c == 0 || T(s(i, j, r, c)) > m) ? T(s(i, j, r, c)) : m; },
            Kokkos::Max<T>(row_max));
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, r + 1),
            [&](const int c, T& acc) {
              const T e = compat::exp(T(s(i, j, r, c)) - row_max);
              s(i, j, r, c) = static_cast<S>(e);
              acc += e;
            },
            sum);
        team.team_barrier();  // the exponentials written above are read below by other threads of the team
        const T inverse = T(1) / sum;
        // Each element is read before it is written by the same thread, so s may be p.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t), [&](const int c) {
          p(i, j, r, c) = store<P>(c <= r ? T(s(i, j, r, c)) * inverse : T(0));
        });
      });
}

// ds = P * (dP - rowsum(P * dP)) for every (b, h) slice; ds may be dp.
template <class P, class G, class D>
void softmax_backward(const ExecSpace& exec, const Kokkos::View<const P****, Layout, MemSpace>& p,
                      const Kokkos::View<G****, Layout, MemSpace>& dp, const Kokkos::View<D****, Layout, MemSpace>& ds) {
  using T = compute_t<G>;
  const int b = static_cast<int>(p.extent(0)), h = static_cast<int>(p.extent(1)), t = static_cast<int>(p.extent(2));
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  kgpt::parallel_for(
      "kgpt::attention::softmax_backward", Kokkos::TeamPolicy<ExecSpace>(exec, b * h * t, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        const int i = row / (h * t), j = (row / t) % h, r = row % t;
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, r + 1),
            [&](const int c, T& acc) { acc += T(p(i, j, r, c)) * T(dp(i, j, r, c)); }, dot);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t), [&](const int c) {
          ds(i, j, r, c) = store<D>(c <= r ? T(p(i, j, r, c)) * (T(dp(i, j, r, c)) - dot) : T(0));
        });
      });
}

// scores: (B, H, T, T) of compute_t<A> (may be the memory of probs when A is compute_t<A>);
// probs: (B, H, T, T) of A, kept for the backward.
template <class A>
void attention_forward(const ExecSpace& exec, const Heads<const A>& q, const Heads<const A>& k,
                       const Heads<const A>& v, compute_t<A>* scores, A* probs, const Heads<A>& o) {
  using T = compute_t<A>;
  using attention_detail::head;
  const int b = q.batch, h = q.heads, t = q.seq, group = q.heads / k.heads;
  const T scale = T(1) / compat::sqrt(static_cast<T>(q.dim));
  for (int i = 0; i < h; ++i) {
    gemm_batched<A, T>(exec, Op::none, Op::transpose, scale, head(q, i), head(k, i / group), T(0),
                       attention_detail::scores(scores, i, h, t), b);
  }
  causal_softmax(exec, Kokkos::View<T****, Layout, MemSpace>(scores, b, h, t, t),
                 Kokkos::View<A****, Layout, MemSpace>(probs, b, h, t, t));
  for (int i = 0; i < h; ++i) {
    gemm_batched<A, A>(exec, Op::none, Op::none, T(1), attention_detail::scores<const A>(probs, i, h, t),
                       head(v, i / group), T(0), head(o, i), b);
  }
}

// dp: (B, H, T, T) scratch of compute_t<A>; ds: (B, H, T, T) scratch of A (may be dp's memory when A
// is compute_t<A>). dq, dk and dv are written, not added to.
template <class A>
void attention_backward(const ExecSpace& exec, const Heads<const A>& q, const Heads<const A>& k,
                        const Heads<const A>& v, const A* probs, const Heads<const A>& d_o, compute_t<A>* dp, A* ds,
                        const Heads<A>& dq, const Heads<A>& dk, const Heads<A>& dv) {
  using T = compute_t<A>;
  using attention_detail::head;
  const int b = q.batch, h = q.heads, t = q.seq, group = q.heads / k.heads;
  const T scale = T(1) / compat::sqrt(static_cast<T>(q.dim));
  for (int i = 0; i < h; ++i) {
    const T accumulate = i % group == 0 ? T(0) : T(1);  // the first query head of a group writes
    // dV = sum_g P^T dO and dP = dO V^T
    gemm_batched<A, A>(exec, Op::transpose, Op::none, T(1), attention_detail::scores<const A>(probs, i, h, t),
                       head(d_o, i), accumulate, head(dv, i / group), b);
    gemm_batched<A, T>(exec, Op::none, Op::transpose, T(1), head(d_o, i), head(v, i / group), T(0),
                       attention_detail::scores(dp, i, h, t), b);
  }
  softmax_backward(exec, Kokkos::View<const A****, Layout, MemSpace>(probs, b, h, t, t),
                   Kokkos::View<T****, Layout, MemSpace>(dp, b, h, t, t), Kokkos::View<A****, Layout, MemSpace>(ds, b, h, t, t));
  for (int i = 0; i < h; ++i) {
    const T accumulate = i % group == 0 ? T(0) : T(1);
    // dQ = s dS K and dK = sum_g s dS^T Q
    gemm_batched<A, A>(exec, Op::none, Op::none, scale, attention_detail::scores<const A>(ds, i, h, t), head(k, i / group),
                       T(0), head(dq, i), b);
    gemm_batched<A, A>(exec, Op::transpose, Op::none, scale, attention_detail::scores<const A>(ds, i, h, t), head(q, i),
                       accumulate, head(dk, i / group), b);
  }
}

}  // namespace

}  // namespace kgpt::model::ops
