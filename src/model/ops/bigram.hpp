#pragma once
// BigramHash (model.bigram_buckets; parameter-golf's records): each position reads a row of a table
// of B rows at a hash of its (previous token, token) pair, and the rows, projected to d_model and
// scaled by a learned scalar s, are added to the token embedding:
//   row(t)    B - 1 at a sequence's first position, else (36313 tok_t XOR 27191 tok_{t-1}) mod (B - 1)
//   forward   x = tok_emb[tok] + s p          p (N, C): the projected rows
//   backward  dp = s dx;  ds += sum over all elements of dx p
// The table's gather and its gradient are the token embedding's (embedding.hpp), at these rows.
// Shapes: tokens and rows (B, T); x, p, dx, dp (N, C) token-major, N = B x T; s a vector of one.

#include <type_traits>

#include "core/bf16.hpp"
#include "core/kernel.hpp"
#include "core/views.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::model::ops {

// The hash's multipliers, as the records define it.
constexpr long long kBigramCurrent = 36313, kBigramPrevious = 27191;

namespace {  // kernels: internal linkage, see core/kernel.hpp

// The table row each position reads. The products are taken in 64 bits, where the records take
// them in 32: the same rows while 36313 x the largest token id fits in 31 bits (vocabularies up to
// 59,138 tokens).
template <class Rows>
void bigram_rows(const ExecSpace& exec, const ConstTokenMatrix& tokens, int buckets, const Rows& rows) {
  const std::size_t seq = tokens.extent(1);
  const long long last = buckets - 1, current = kBigramCurrent, previous = kBigramPrevious;
  kgpt::parallel_for(
      "kgpt::bigram::rows", Kokkos::RangePolicy<ExecSpace>(exec, 0, tokens.extent(0) * seq),
      KOKKOS_LAMBDA(const std::size_t i) {
        const std::size_t b = i / seq, t = i % seq;
        if (t == 0) {
          rows(b, t) = static_cast<int>(last);
        } else {
          const long long h = (current * tokens(b, t)) ^ (previous * tokens(b, t - 1));
          rows(b, t) = static_cast<int>(h % last);
        }
      });
}

// x = tok_emb[tok] + s p, one pass.
template <class T, class Table, class Scale, class P, class X>
void bigram_add_forward(const ExecSpace& exec, const ConstTokenMatrix& tokens, const Table& table, const Scale& scale,
                        const P& p, const X& x) {
  using A = typename X::value_type;
  const std::size_t seq = tokens.extent(1);
  const ConstRows<P> projected(p);
  const Rows<X> out(x);
  const auto* s = scale.data();
  for_each_element(exec, "kgpt::bigram::add", x.extent(0), x.extent(1),
                   KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
                     out(i, j) = store<A>(T(table(tokens(i / seq, i % seq), j)) + T(s[0]) * T(projected(i, j)));
                   });
}

// dp = s dx, and ds += the sum of dx p: per column first (into `columns`, C elements), then the C
// column sums in order by one thread, so the sum is the same on every run.
template <class T, bool Packs = backend::Traits::packed_elementwise, class P, class Scale, class DX, class DP, class DScale>
void bigram_scale_backward(const ExecSpace& exec, const P& p, const Scale& scale, const DX& dx, const DP& dp,
                           const DScale& dscale, const Vector<T>& columns, const Workspace<T>& partials = {}) {
  // The scaled add's terms (elementwise.hpp) with one scale for every column.
  using Terms = ScaledTerms<T, P, DX, DP, std::remove_const_t<typename Scale::value_type>, true>;
  const Terms terms{ConstRows<P>(p), ConstRows<DX>(dx), Rows<DP>(dp), scale.data()};
  ColumnSums<T, 1>::template run_packed<pack_width<P, DX, DP>(), Packs>(
      exec, "kgpt::bigram::scale_backward", p.extent(0), p.extent(1), partials, terms,
      KOKKOS_LAMBDA(const int, const std::size_t j, const T sum) { columns(j) = sum; });
  const std::size_t c = p.extent(1);
  kgpt::parallel_for(
      "kgpt::bigram::scale_sum", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1), KOKKOS_LAMBDA(const std::size_t) {
        T total = 0;
        for (std::size_t j = 0; j < c; ++j) total += columns(j);
        dscale(0) += total;
      });
}

}  // namespace

}  // namespace kgpt::model::ops
