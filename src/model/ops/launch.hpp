#pragma once
// How kgpt's kernels map work to threads, so that on a GPU every warp reads consecutive addresses:
//   flat_for        one thread per element of contiguous storage
//   for_each_element a team per row of an (N, C) array, threads over its columns (elementwise ops)
//   rows of width C a team per row, its threads over the row (norms over d_model, softmax rows)
//   short rows      several rows per team, one row per thread of a team and its vector lanes over
//                   the row: a warp per row of D = 64 (the q/k norms); one thread per row on the host
//   column sums     two stages, both coalesced and in a fixed order: a team sums a block of rows
//                   into partial sums per column (threads over columns, the block's rows in order),
//                   then one thread per column adds the blocks' partials in order
// On the host every team is one thread, so rows are walked in order with the columns inside.

#include <cstdint>

#include "core/backend.hpp"
#include "core/views.hpp"

namespace kgpt::model::ops {

using Team = Kokkos::TeamPolicy<ExecSpace>::member_type;

template <class F>
void flat_for(const ExecSpace& exec, const char* label, std::size_t n, const F& f) {
  Kokkos::parallel_for(label, Kokkos::RangePolicy<ExecSpace>(exec, 0, n), f);
}

// f(i, j) for every element of an (n, c) array: a team per row, its threads over the columns (no
// index division per element, consecutive threads on consecutive columns).
template <class F>
void for_each_element(const ExecSpace& exec, const char* label, std::size_t n, std::size_t c, const F& f) {
  Kokkos::parallel_for(
      label, Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(n), Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const std::size_t i = static_cast<std::size_t>(team.league_rank());
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const std::size_t j) { f(i, j); });
      });
}

// Short rows: team t and thread r of it take row t * rows_per_team + r; vector lanes split the row.
struct ShortRows {
  static constexpr int rows_per_team = backend::on_gpu ? 8 : 1;
  static constexpr int lanes = backend::on_gpu ? 32 : 1;
  static Kokkos::TeamPolicy<ExecSpace> policy(const ExecSpace& exec, std::size_t rows) {
    const auto teams = static_cast<int>((rows + rows_per_team - 1) / rows_per_team);
    return Kokkos::TeamPolicy<ExecSpace>(exec, teams, rows_per_team, lanes);
  }
  static KOKKOS_INLINE_FUNCTION std::size_t row(const Team& team) {
    return static_cast<std::size_t>(team.league_rank()) * rows_per_team + team.team_rank();
  }
};

// Column sums of an (N, C) term in two stages. Each column j has `K` sums (K terms per element).
// term(i, j, acc) adds its K terms at (i, j) to acc[0..K) and may write elementwise outputs at
// (i, j) in the same pass. The partials, (blocks, K * C) of T, come from the caller's workspace;
// finish(k, j, sum) receives each column's total, added over the blocks in block order. Without
// partials from the caller (tests), run allocates them.
template <class T, int K>
struct ColumnSums {
  static constexpr int rows_per_block = 128;
  static std::size_t blocks(std::size_t n) { return (n + rows_per_block - 1) / rows_per_block; }
  static std::size_t workspace(std::size_t n, std::size_t c) { return blocks(n) * K * c; }

  template <class Term, class Finish>
  static void run(const ExecSpace& exec, const char* label, std::size_t n, std::size_t c, T* partial_memory,
                  const Term& term, const Finish& finish) {
    const std::size_t block_count = blocks(n);
    const std::size_t width = K * c;
    Kokkos::View<T*, MemSpace> owned;
    if (partial_memory == nullptr) {
      owned = Kokkos::View<T*, MemSpace>("kgpt::column_sums::partials", block_count * width);
      partial_memory = owned.data();
    }
    const Kokkos::View<T**, Layout, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> partial(partial_memory,
                                                                                                 block_count, width);
    Kokkos::parallel_for(
        label, Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(block_count), Kokkos::AUTO),
        KOKKOS_LAMBDA(const Team& team) {
          const std::size_t block = static_cast<std::size_t>(team.league_rank());
          const std::size_t first = block * rows_per_block;
          const std::size_t last = first + rows_per_block < n ? first + rows_per_block : n;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const std::size_t j) {
            T acc[K];
            for (int k = 0; k < K; ++k) acc[k] = 0;
            for (std::size_t i = first; i < last; ++i) term(i, j, acc);
            for (int k = 0; k < K; ++k) partial(block, k * c + j) = acc[k];
          });
        });
    Kokkos::parallel_for(
        "kgpt::column_sums::finish", Kokkos::RangePolicy<ExecSpace>(exec, 0, width), KOKKOS_LAMBDA(const std::size_t x) {
          T total = 0;
          for (std::size_t b = 0; b < block_count; ++b) total += partial(b, x);
          finish(static_cast<int>(x / c), x % c, total);
        });
  }
};

}  // namespace kgpt::model::ops
