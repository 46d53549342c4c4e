#pragma once
// How kgpt's kernels map work to threads, so that on a GPU every warp reads consecutive addresses:
//   flat_for        one thread per element of contiguous storage
//   for_each_element a team per row of an (N, C) array, threads over its columns
//   map_elements    elementwise ops: a thread per 16 bytes of each array (8 bf16, 4 floats), with
//                   16-byte loads and stores, where the arrays are aligned for it
//   rows of width C a row per thread of a team, its vector lanes over the row's packs (PackedRows:
//                   the norms over d_model, the q/k heads' norm and RoPE)
//   column sums     stages, all coalesced and in a fixed order: a team sums a block of 32 rows
//                   into partial sums per column (threads over a tile of columns, the block's rows
//                   in order), the partials are summed the same way while more than 32 remain,
//                   then one thread per column adds the last ones in order
// On the host every team is one thread, so rows are walked in order with the columns inside.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/views.hpp"
#include "core/kernel.hpp"
#include "model/storage.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

using Team = Kokkos::TeamPolicy<ExecSpace>::member_type;

template <class F>
void flat_for(const ExecSpace& exec, const char* label, std::size_t n, const F& f) {
  kgpt::parallel_for(label, Kokkos::RangePolicy<ExecSpace>(exec, 0, n), f);
}

// f(i, j) for every element of an (n, c) array: a team per row, its threads over the columns (no
// index division per element, consecutive threads on consecutive columns).
template <class F>
void for_each_element(const ExecSpace& exec, const char* label, std::size_t n, std::size_t c, const F& f) {
  kgpt::parallel_for(
      label, Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(n), Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const std::size_t i = static_cast<std::size_t>(team.league_rank());
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const std::size_t j) { f(i, j); });
      });
}

namespace detail {

struct alignas(16) Bytes16 {
  std::uint32_t word[4];
};

// W consecutive elements at p (16-byte aligned) as T, read 16 bytes at a time.
template <int W, class T, class A>
KOKKOS_INLINE_FUNCTION void load_pack(const A* p, T* out) {
  constexpr int per_load = 16 / static_cast<int>(sizeof(A));
  for (int load = 0; load < W / per_load; ++load) {
    const Bytes16 bytes = reinterpret_cast<const Bytes16*>(p)[load];
    A values[per_load];
    std::memcpy(values, &bytes, sizeof bytes);
    for (int k = 0; k < per_load; ++k) out[load * per_load + k] = T(values[k]);
  }
}

// The W values in `in` stored at p (16-byte aligned) as A, written 16 bytes at a time.
template <int W, class T, class A>
KOKKOS_INLINE_FUNCTION void store_pack(A* p, const T* in) {
  constexpr int per_store = 16 / static_cast<int>(sizeof(A));
  for (int chunk = 0; chunk < W / per_store; ++chunk) {
    A values[per_store];
    for (int k = 0; k < per_store; ++k) values[k] = store<A>(in[chunk * per_store + k]);
    Bytes16 bytes;
    std::memcpy(&bytes, values, sizeof bytes);
    reinterpret_cast<Bytes16*>(p)[chunk] = bytes;
  }
}

// Whether an (n, c) View's packs of W elements start on 16 bytes: rows contiguous inside, the data
// and each row's start aligned.
template <int W, class V>
bool packs_aligned(const V& v) {
  using A = typename V::value_type;
  constexpr std::size_t per_16 = 16 / sizeof(A);
  const std::size_t ld = v.extent(0) > 1 ? v.stride(0) : v.extent(1);
  return (v.extent(1) <= 1 || v.stride(1) == 1) && reinterpret_cast<std::uintptr_t>(v.data()) % 16 == 0 &&
         ld % per_16 == 0;
}

// Elements in 16 bytes of the narrowest of the Views' value types.
template <class... Views>
constexpr int pack_of() {
  std::size_t narrowest = 16;
  for (const std::size_t size : {sizeof(typename Views::value_type)...}) narrowest = size < narrowest ? size : narrowest;
  return 16 / static_cast<int>(narrowest);
}

// W consecutive values at p as T, or the W values of `in` stored at p as A: with 16-byte accesses
// where W of them fill whole 16-byte words (p then on 16 bytes), one at a time otherwise (W = 1).
template <int W, class T, class A>
KOKKOS_INLINE_FUNCTION void load_values(const A* p, T* out) {
  if constexpr (W * sizeof(A) % 16 == 0) {
    load_pack<W>(p, out);
  } else {
    for (int k = 0; k < W; ++k) out[k] = T(p[k]);
  }
}
template <int W, class T, class A>
KOKKOS_INLINE_FUNCTION void store_values(A* p, const T* in) {
  if constexpr (W * sizeof(A) % 16 == 0) {
    store_pack<W>(p, in);
  } else {
    for (int k = 0; k < W; ++k) p[k] = store<A>(in[k]);
  }
}

// Whether a RowView's packs of W elements start on 16 bytes.
template <int W, class A>
bool packs_aligned(const RowView<A>& v) {
  constexpr std::size_t per_16 = 16 / sizeof(A);
  return reinterpret_cast<std::uintptr_t>(v.data) % 16 == 0 && v.ld % per_16 == 0 && W % per_16 == 0;
}

}  // namespace detail

// out(i, j) = op(j, in(i, j)...) for every element of (n, c) arrays, computed in T and stored in
// out's type (one or two inputs; out may be one of them). On a GPU (Packs), where C is a multiple of
// W (16 bytes of the narrowest array: 8 bf16, 4 floats) and every array's packs start on 16 bytes,
// each thread takes W consecutive elements with 16-byte loads and stores: one 2-byte access per
// thread leaves a GPU's memory system far from its bandwidth. Otherwise, and on the host, where
// the compiler vectorises the plain loop, an element per thread (for_each_element). Tests run both.
template <class T, bool Packs = backend::Traits::packed_elementwise, class Op, class Out, class In>
void map_elements(const ExecSpace& exec, const char* label, const Op& op, const Out& out, const In& in) {
  using A = typename Out::value_type;
  using I = std::remove_const_t<typename In::value_type>;
  constexpr int W = 16 / static_cast<int>(sizeof(A) < sizeof(I) ? sizeof(A) : sizeof(I));
  const std::size_t n = out.extent(0), c = out.extent(1);
  if (Packs && c % W == 0 && detail::packs_aligned<W>(out) && detail::packs_aligned<W>(in)) {
    const RowView<A> o(out);
    const RowView<const I> x(in);
    const std::size_t packs_per_row = c / W;
    flat_for(exec, label, n * packs_per_row, KOKKOS_LAMBDA(const std::size_t p) {
      const std::size_t i = p / packs_per_row, j = p % packs_per_row * W;
      T a[W], r[W];
      detail::load_pack<W>(&x(i, j), a);
      for (int k = 0; k < W; ++k) r[k] = op(j + k, a[k]);
      detail::store_pack<W>(&o(i, j), r);
    });
    return;
  }
  for_each_element(exec, label, n, c, KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
    out(i, j) = store<A>(op(j, T(in(i, j))));
  });
}

template <class T, bool Packs = backend::Traits::packed_elementwise, class Op, class Out, class In1, class In2>
void map_elements(const ExecSpace& exec, const char* label, const Op& op, const Out& out, const In1& in1,
                  const In2& in2) {
  using A = typename Out::value_type;
  using I1 = std::remove_const_t<typename In1::value_type>;
  using I2 = std::remove_const_t<typename In2::value_type>;
  constexpr std::size_t narrowest = sizeof(A) < sizeof(I1) ? (sizeof(A) < sizeof(I2) ? sizeof(A) : sizeof(I2))
                                                           : (sizeof(I1) < sizeof(I2) ? sizeof(I1) : sizeof(I2));
  constexpr int W = 16 / static_cast<int>(narrowest);
  const std::size_t n = out.extent(0), c = out.extent(1);
  if (Packs && c % W == 0 && detail::packs_aligned<W>(out) && detail::packs_aligned<W>(in1) &&
      detail::packs_aligned<W>(in2)) {
    const RowView<A> o(out);
    const RowView<const I1> x(in1);
    const RowView<const I2> y(in2);
    const std::size_t packs_per_row = c / W;
    flat_for(exec, label, n * packs_per_row, KOKKOS_LAMBDA(const std::size_t p) {
      const std::size_t i = p / packs_per_row, j = p % packs_per_row * W;
      T a[W], b[W], r[W];
      detail::load_pack<W>(&x(i, j), a);
      detail::load_pack<W>(&y(i, j), b);
      for (int k = 0; k < W; ++k) r[k] = op(j + k, a[k], b[k]);
      detail::store_pack<W>(&o(i, j), r);
    });
    return;
  }
  for_each_element(exec, label, n, c, KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
    out(i, j) = store<A>(op(j, T(in1(i, j)), T(in2(i, j))));
  });
}

// Rows of C elements, each lane of a row reading P consecutive elements: the pack width, 16 bytes of
// the narrowest array (8 bf16, 4 floats) on a GPU where every array's packs start on 16 bytes, 1 on
// the host and wherever they do not. A row per thread of a team, its vector lanes over the row's
// packs (a warp of 32 lanes for d_model 512 in bf16, two packs a lane; a warp per row of 32
// elements at P = 1), 256 / lanes rows per team; on the host a team is one row and its lanes run in
// order. The row kernels (the norms, q/k RoPE) are written once with P a template parameter, so a
// formula has one kernel; `fits` says whether a call's arrays allow P.
template <int P>
struct PackedRows {
  static int lanes(std::size_t c) {
    const std::size_t packs = c / P;
    int l = 1;
    while (l < 32 && static_cast<std::size_t>(l) < packs) l *= 2;
    return l;
  }
  static int rows_per_team(std::size_t c) { return backend::on_gpu ? 256 / lanes(c) : 1; }
  static Kokkos::TeamPolicy<ExecSpace> policy(const ExecSpace& exec, std::size_t n, std::size_t c) {
    const int per_team = rows_per_team(c);
    const auto teams = static_cast<int>((n + per_team - 1) / per_team);
    return Kokkos::TeamPolicy<ExecSpace>(exec, teams, per_team, backend::on_gpu ? lanes(c) : 1);
  }
  static KOKKOS_INLINE_FUNCTION int row(const Team& team, int per_team) {
    return team.league_rank() * per_team + team.team_rank();
  }
  // Whether rows of c elements split into packs and every (N, C) array's packs start on 16 bytes
  // (at P = 1, any rows do).
  template <class... Views>
  static bool fits(std::size_t c, const Views&... views) {
    if constexpr (P == 1) return true;
    return c % P == 0 && (detail::packs_aligned<P>(views) && ...);
  }
  // Whether a parameter vector's (C) packs start on 16 bytes.
  template <class V>
  static bool aligned(const V* data) {
    return P == 1 || reinterpret_cast<std::uintptr_t>(data) % 16 == 0;
  }
};

// Column sums of an (N, C) term, in stages that are coalesced and keep a fixed order. Each column j
// has `K` sums (K terms per element). term(i, j, acc) adds its K terms at (i, j) to acc[0..K) and
// may write elementwise outputs at (i, j) in the same pass. Stage 1 adds blocks of rows_per_block
// rows, in order, into partials (blocks, K * C): on a GPU a team of team_columns threads takes one
// block of rows and a tile of columns, a thread per column, so a thread walks 32 rows (not a whole
// column) and every block is a team of its own. While more than rows_per_block partial rows are
// left, the same pass adds blocks of them; then one thread per column adds the last ones in order
// and finish(k, j, sum) receives each column's total. The partials of every stage come from the
// caller's workspace (`workspace` elements); without it (tests), run allocates them.
template <class T, int K>
struct ColumnSums {
  static constexpr std::size_t rows_per_block = 32;
  static constexpr int team_columns = backend::Traits::column_sum_team_columns;  // 0: one team takes every column
  static std::size_t blocks(std::size_t n) { return (n + rows_per_block - 1) / rows_per_block; }
  // Partial rows of every stage for N rows: blocks(N), blocks(blocks(N)), ... while above one block.
  static std::size_t partial_rows(std::size_t n) {
    std::size_t total = 0;
    for (std::size_t rows = blocks(n); rows > 0; rows = blocks(rows)) {
      total += rows;
      if (rows <= rows_per_block) break;
    }
    return total;
  }
  static std::size_t workspace(std::size_t n, std::size_t c) { return partial_rows(n) * K * c; }

  using Partials = Kokkos::View<T**, Layout, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  template <class Term, class Finish>
  static void run(const ExecSpace& exec, const char* label, std::size_t n, std::size_t c, const Workspace<T>& partials,
                  const Term& term, const Finish& finish) {
    Kokkos::View<T*, MemSpace> owned;
    const Partials partial = first_partials(label, n, c, partials, owned);
    block_pass<K>(exec, label, n, c, term, KOKKOS_LAMBDA(const std::size_t block, const std::size_t j, const T* acc) {
      for (int k = 0; k < K; ++k) partial(block, k * c + j) = acc[k];
    });
    finish_sums(exec, n, c, partial, finish);
  }

  // The same sums from a term over W consecutive columns (the pack width: the columns of 16 bytes of
  // the narrowest array on a GPU, 1 on the host), so that a GPU's threads read and write 16 bytes at
  // a time. `term` is a functor with
  //   template <int W> KOKKOS_INLINE_FUNCTION void terms(std::size_t i, std::size_t j, T (*acc)[W]) const
  // adding row i's K terms of columns j .. j + W to acc[k][0 .. W) and writing its elementwise
  // outputs there, and `template <int W> bool packs_fit() const`: whether its arrays' packs of W
  // start on 16 bytes. Where they do not, or C is no multiple of W, and on the host (Packs false,
  // where the compiler vectorises the plain loop), a thread takes one column. The sums are the same
  // either way, bit for bit: each column's rows are added in order. Tests run both.
  template <int W, bool Packs = backend::Traits::packed_elementwise, class Term, class Finish>
  static void run_packed(const ExecSpace& exec, const char* label, std::size_t n, std::size_t c,
                         const Workspace<T>& partials, const Term& term, const Finish& finish) {
    if (Packs && W > 1 && c % W == 0 && term.template packs_fit<W>()) {
      run_with<W>(exec, label, n, c, partials, term, finish);
    } else {
      run_with<1>(exec, label, n, c, partials, term, finish);
    }
  }

  // run_packed's first stage: block_pass over the packs of each row, each pack's K x W sums in one
  // thread's accumulator (terms reads it as K rows of W).
  template <int W, class Term, class Finish>
  static void run_with(const ExecSpace& exec, const char* label, std::size_t n, std::size_t c,
                       const Workspace<T>& partials, const Term& term, const Finish& finish) {
    Kokkos::View<T*, MemSpace> owned;
    const Partials partial = first_partials(label, n, c, partials, owned);
    block_pass<K * W>(
        exec, label, n, c / W,
        KOKKOS_LAMBDA(const std::size_t i, const std::size_t pack, T* acc) {
          term.template terms<W>(i, pack * W, reinterpret_cast<T(*)[W]>(acc));
        },
        KOKKOS_LAMBDA(const std::size_t block, const std::size_t pack, const T* acc) {
          for (int k = 0; k < K; ++k)
            for (int w = 0; w < W; ++w) partial(block, k * c + pack * W + w) = acc[k * W + w];
        });
    finish_sums(exec, n, c, partial, finish);
  }

  // The first stage's partials (blocks(n), K C), in the caller's workspace or, without one, in
  // `owned`, which this allocates.
  static Partials first_partials(const char* label, std::size_t n, std::size_t c, const Workspace<T>& partials,
                                 Kokkos::View<T*, MemSpace>& owned) {
    T* memory = nullptr;
    if (partials.empty()) {
      owned = Kokkos::View<T*, MemSpace>("kgpt::column_sums::partials", workspace(n, c));
      memory = owned.data();
    } else {
      memory = partials.take(workspace(n, c), label);
    }
    return Partials(memory, blocks(n), K * c);
  }

  // The stages after the first: blocks of partial rows while more than one block is left, then
  // each column's last partials in order, handed to finish(k, j, sum). The later stages' partials
  // follow the first's in its memory.
  template <class Finish>
  static void finish_sums(const ExecSpace& exec, std::size_t n, std::size_t c, Partials partial, const Finish& finish) {
    const std::size_t width = K * c;
    std::size_t rows = blocks(n);
    T* next = partial.data() + rows * width;
    while (rows > rows_per_block) {
      const Partials from = partial;
      const Partials to(next, blocks(rows), width);
      block_pass<1>(
          exec, "kgpt::column_sums::partials", rows, width,
          KOKKOS_LAMBDA(const std::size_t i, const std::size_t x, T* acc) { acc[0] += from(i, x); },
          KOKKOS_LAMBDA(const std::size_t block, const std::size_t x, const T* acc) { to(block, x) = acc[0]; });
      partial = to;
      next += blocks(rows) * width;
      rows = blocks(rows);
    }
    const Partials last = partial;
    kgpt::parallel_for(
        "kgpt::column_sums::finish", Kokkos::RangePolicy<ExecSpace>(exec, 0, width), KOKKOS_LAMBDA(const std::size_t x) {
          T total = 0;
          for (std::size_t b = 0; b < rows; ++b) total += last(b, x);
          finish(static_cast<int>(x / c), x % c, total);
        });
  }

  // store(block, j, acc) of each block of rows_per_block rows and each column j < cols, the rows
  // added in order. (Public: CUDA's extended lambdas cannot live in a private member function.)
  template <int KK, class Term, class Store>
  static void block_pass(const ExecSpace& exec, const char* label, std::size_t rows, std::size_t cols, const Term& term,
                         const Store& store) {
    const std::size_t block_count = blocks(rows);
    if (block_count == 0 || cols == 0) return;
    // A team's threads: team_columns columns, or fewer where the rows are narrower.
    const std::size_t tile = team_columns > 0 ? std::min<std::size_t>(cols, team_columns) : cols;
    const std::size_t tiles = (cols + tile - 1) / tile;
    const auto teams = static_cast<int>(block_count * tiles);
    const auto policy = team_columns > 0 ? Kokkos::TeamPolicy<ExecSpace>(exec, teams, static_cast<int>(tile))
                                         : Kokkos::TeamPolicy<ExecSpace>(exec, teams, Kokkos::AUTO);
    kgpt::parallel_for(label, policy, KOKKOS_LAMBDA(const Team& team) {
      const std::size_t block = static_cast<std::size_t>(team.league_rank()) / tiles;
      const std::size_t first_col = static_cast<std::size_t>(team.league_rank()) % tiles * tile;
      const std::size_t last_col = first_col + tile < cols ? first_col + tile : cols;
      const std::size_t first = block * rows_per_block;
      const std::size_t last = first + rows_per_block < rows ? first + rows_per_block : rows;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, first_col, last_col), [&](const std::size_t j) {
        T acc[KK];
        for (int k = 0; k < KK; ++k) acc[k] = 0;
        for (std::size_t i = first; i < last; ++i) term(i, j, acc);
        store(block, j, acc);
      });
    });
  }
};

}  // namespace

}  // namespace kgpt::model::ops
