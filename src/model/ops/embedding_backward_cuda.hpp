#pragma once
// The token embedding's table gradient on GPUs: a stable counting sort puts the rows in (token, row)
// order, then a team per token adds its rows in increasing order, per channel: the same additions
// in the same order as the host's pass per channel (embedding_backward_host.hpp), so the same bits,
// without N dependent steps on C threads. The sort: per block of rows, a count of each token
// (integer atomics: the same counts in any order); one exclusive scan over (token, block) gives
// where each block's rows of each token go; each row's place is that plus the number of earlier
// rows of its block with its token. Everything lives in a workspace made with the model: nothing
// is allocated and nothing waits for the host. Plain Kokkos code: it compiles and is tested on the
// host too (where the in-block ranking is quadratic, fine for tests).

#include "core/backend.hpp"
#include "core/views.hpp"

namespace kgpt::model::ops {

template <class T, class DOut, class DTable>
void embedding_backward_by_token(const ExecSpace& exec, const ConstTokenMatrix& tokens, const DOut& dout,
                                 const DTable& dtable, const EmbeddingSortSpace& space) {
  const int seq = static_cast<int>(tokens.extent(1));
  const int n = static_cast<int>(dout.extent(0)), c = static_cast<int>(dout.extent(1));
  const int vocab = static_cast<int>(dtable.extent(0));
  if (n == 0) return;
  constexpr int rows_per_block = EmbeddingSortSpace::rows_per_block;
  const int blocks = (n + rows_per_block - 1) / rows_per_block;
  const auto order = space.order, offsets = space.offsets, start = space.start;
  // offsets(v * blocks + b): rows of token v in block b, then (after the scan) where they start.
  const auto counts = Kokkos::subview(offsets, std::make_pair(0, vocab * blocks));
  Kokkos::deep_copy(exec, counts, 0);
  Kokkos::parallel_for(
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
  Kokkos::parallel_for(
      "kgpt::embedding::start_end", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1), KOKKOS_LAMBDA(const int) { start(vocab) = n; });
  Kokkos::parallel_for(
      "kgpt::embedding::place", Kokkos::RangePolicy<ExecSpace>(exec, 0, n), KOKKOS_LAMBDA(const int row) {
        const int token = tokens(row / seq, row % seq), block = row / rows_per_block;
        int rank = 0;
        for (int earlier = block * rows_per_block; earlier < row; ++earlier) {
          rank += tokens(earlier / seq, earlier % seq) == token ? 1 : 0;
        }
        order(offsets(token * blocks + block) + rank) = row;
      });
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::embedding::backward_by_token", Kokkos::TeamPolicy<ExecSpace>(exec, vocab, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int v = team.league_rank(), begin = start(v), end = start(v + 1);
        if (begin == end) return;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) {
          T sum = dtable(v, j);
          for (int i = begin; i < end; ++i) sum += T(dout(order(i), j));
          dtable(v, j) = sum;
        });
      });
}

template <class Backend>
struct EmbeddingBackward;

template <>
struct EmbeddingBackward<backend::Cuda> {
  template <class T, class DOut, class DTable>
  static void run(const ExecSpace& exec, const ConstTokenMatrix& tokens, const DOut& dout, const DTable& dtable,
                  const EmbeddingSortSpace& space) {
    embedding_backward_by_token<T>(exec, tokens, dout, dtable, space);
  }
};

}  // namespace kgpt::model::ops
