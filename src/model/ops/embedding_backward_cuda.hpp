#pragma once
// The token embedding's table gradient on GPUs, without serial chains: a stable counting sort puts
// the rows in (token, row) order; each token's rows are cut, in that order, into segments of
// rows_per_segment; a team per segment adds its rows into a partial sum per channel, and a team per
// token adds its segments' partials in order into the table's gradient:
//   dtable(v, c) += sum over segments k of (sum of dout(r, c) over the rows r of segment k)
// each sum taken in order from zero. A token seen in a few rows is one segment; a frequent one (real
// text has tokens in several percent of the rows) is spread over many teams instead of one thread
// per channel walking all its rows. The order of the additions is fixed, so runs repeat bit for bit.
//   The sort: per block of rows, a count of each token (integer atomics: the same counts in any
//   order); one exclusive scan over (token, block) gives where each block's rows of each token go;
//   each row's place is that plus the number of earlier rows of its block with its token.
//   The segments: a token with more than rows_per_segment rows ("large") has its segments at slots
//   key(v) .. key(v) + segments(v) - 1 of the partials, key(v) = start(v) / rows_per_segment + the
//   number of large tokens before v; keys grow with v and no two segments share a slot, so the team
//   of a slot finds its token by a binary search over the keys.
// Everything lives in a workspace made with the model: nothing is allocated and nothing waits for
// the host. Plain Kokkos code: it compiles and is tested on the host too.

#include <string>

#include "core/backend.hpp"
#include "core/error.hpp"
#include "core/kernel.hpp"
#include "core/views.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

template <class T, class DOut, class DTable>
void embedding_backward_by_token(const ExecSpace& exec, const ConstTokenMatrix& tokens, const DOut& dout,
                                 const DTable& dtable, const EmbeddingSortSpace<T>& space) {
  const int seq = static_cast<int>(tokens.extent(1));
  const int n = static_cast<int>(dout.extent(0)), c = static_cast<int>(dout.extent(1));
  const int vocab = static_cast<int>(dtable.extent(0));
  if (n == 0) return;
  using Space = EmbeddingSortSpace<T>;
  if (!space.holds(static_cast<std::size_t>(n), static_cast<std::size_t>(vocab), static_cast<std::size_t>(c))) {
    throw Error(ExitCode::failure, "kgpt::embedding::backward: the sort workspace is smaller than " + std::to_string(n) +
                                       " rows of " + std::to_string(c) + " channels over a vocabulary of " +
                                       std::to_string(vocab) + " need");
  }
  constexpr int rows_per_block = Space::rows_per_block;
  constexpr int segment = Space::rows_per_segment;
  const int blocks = (n + rows_per_block - 1) / rows_per_block;
  const auto order = space.order, offsets = space.offsets, start = space.start, key = space.key;
  const RowView<T> partials(space.partials.data(), static_cast<std::size_t>(c));
  const RowView<const typename DOut::value_type> d(dout);
  const RowView<typename DTable::value_type> table(dtable);
  // offsets(v * blocks + b): rows of token v in block b, then (after the scan) where they start.
  const auto counts = Kokkos::subview(offsets, std::make_pair(0, vocab * blocks));
  Kokkos::deep_copy(exec, counts, 0);
  kgpt::parallel_for(
      "kgpt::embedding::count", Kokkos::RangePolicy<ExecSpace>(exec, 0, n), KOKKOS_LAMBDA(const int row) {
        Kokkos::atomic_add(&offsets(tokens(row / seq, row % seq) * blocks + row / rows_per_block), 1);
      });
  Kokkos::parallel_scan(
      "kgpt::embedding::scan", Kokkos::RangePolicy<ExecSpace>(exec, 0, vocab * blocks),
      KOKKOS_LAMBDA(const int x, int& before, const bool final) {
        const int count = offsets(x);
        if (final) {
          offsets(x) = before;
          if (x % blocks == 0) start(x / blocks) = before;
        }
        before += count;
      });
  kgpt::parallel_for(
      "kgpt::embedding::start_end", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1), KOKKOS_LAMBDA(const int) { start(vocab) = n; });
  kgpt::parallel_for(
      "kgpt::embedding::place", Kokkos::RangePolicy<ExecSpace>(exec, 0, n), KOKKOS_LAMBDA(const int row) {
        const int token = tokens(row / seq, row % seq), block = row / rows_per_block;
        int rank = 0;
        for (int earlier = block * rows_per_block; earlier < row; ++earlier) {
          rank += tokens(earlier / seq, earlier % seq) == token ? 1 : 0;
        }
        order(offsets(token * blocks + block) + rank) = row;
      });
  Kokkos::parallel_scan(
      "kgpt::embedding::segment_keys", Kokkos::RangePolicy<ExecSpace>(exec, 0, vocab),
      KOKKOS_LAMBDA(const int v, int& large_before, const bool final) {
        if (final) key(v) = start(v) / segment + large_before;
        large_before += start(v + 1) - start(v) > segment ? 1 : 0;
      });
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  // The segments of large tokens: a team per slot; slots no segment has end at once.
  kgpt::parallel_for(
      "kgpt::embedding::segment_sums", Kokkos::TeamPolicy<ExecSpace>(exec, Space::slots(n), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int slot = team.league_rank();
        int low = 0, high = vocab - 1;  // the last token whose key is at most slot
        while (low < high) {
          const int mid = (low + high + 1) / 2;
          if (key(mid) <= slot) low = mid;
          else high = mid - 1;
        }
        const int v = low, rows = start(v + 1) - start(v);
        if (rows <= segment || key(v) > slot) return;
        const int k = slot - key(v);
        if (k * segment >= rows) return;
        const int begin = start(v) + k * segment, end = begin + segment < start(v + 1) ? begin + segment : start(v + 1);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) {
          T sum = 0;
          for (int i = begin; i < end; ++i) sum += T(d(order(i), j));
          partials(slot, j) = sum;
        });
      });
  kgpt::parallel_for(
      "kgpt::embedding::backward_by_token", Kokkos::TeamPolicy<ExecSpace>(exec, vocab, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int v = team.league_rank(), begin = start(v), end = start(v + 1), rows = end - begin;
        if (rows == 0) return;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) {
          T sum = 0;
          if (rows <= segment) {
            for (int i = begin; i < end; ++i) sum += T(d(order(i), j));
          } else {
            const int segments = (rows + segment - 1) / segment;
            for (int k = 0; k < segments; ++k) sum += partials(key(v) + k, j);
          }
          table(v, j) += sum;
        });
      });
}

}  // namespace

template <class Backend>
struct EmbeddingBackward;

template <>
struct EmbeddingBackward<backend::Cuda> {
  template <class T, class DOut, class DTable>
  static void run(const ExecSpace& exec, const ConstTokenMatrix& tokens, const DOut& dout, const DTable& dtable,
                  const EmbeddingSortSpace<T>& space) {
    embedding_backward_by_token<T>(exec, tokens, dout, dtable, space);
  }
};

}  // namespace kgpt::model::ops
