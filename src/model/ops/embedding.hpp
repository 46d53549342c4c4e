#pragma once
// Token and position embeddings.
//   token:    out(n, c) = table(token(n), c) (+ wpe(n % T, c) with positions)
//                                                    tokens (B, T), table (V, C), out (N = B*T, C)
//             dtable(v, c) += sum of dout(n, c) over the n with token(n) = v
//   position: dwpe(t, c) += sum over b of dx(b*T + t, c)
// The tables are parameters (float or double); out and dout are activations (any storage type).
// The table gradients are summed in a fixed order, without atomics, so they are the same bit for
// bit on every run. On the host one pass per channel over all rows in order does that
// (embedding_backward_host.hpp); on a GPU it would leave all but C threads idle through N dependent
// steps, so there the rows are put in (token, row) order by a counting sort and summed in segments
// of 32 rows, then per token (embedding_backward_cuda.hpp).

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/views.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

template <class T, class Table, class Out>
void embedding_forward(const ExecSpace& exec, const ConstTokenMatrix& tokens, const Table& table, const Out& out) {
  using A = typename Out::value_type;
  const std::size_t seq = tokens.extent(1);
  for_each_element(exec, "kgpt::embedding::forward", out.extent(0), out.extent(1),
                   KOKKOS_LAMBDA(const std::size_t row, const std::size_t j) {
                     out(row, j) = store<A>(T(table(tokens(row / seq, row % seq), j)));
                   });
}

// out = wte[tokens] + wpe[positions] (gpt2), in one pass.
template <class T, class Table, class Positions, class Out>
void embedding_forward(const ExecSpace& exec, const ConstTokenMatrix& tokens, const Table& table,
                       const Positions& wpe, const Out& out) {
  using A = typename Out::value_type;
  const std::size_t seq = tokens.extent(1);
  for_each_element(exec, "kgpt::embedding::forward_with_positions", out.extent(0), out.extent(1),
                   KOKKOS_LAMBDA(const std::size_t row, const std::size_t j) {
                     out(row, j) = store<A>(T(table(tokens(row / seq, row % seq), j)) + T(wpe(row % seq, j)));
                   });
}

template <class T, class DX, class DWpe>
void position_embedding_backward(const ExecSpace& exec, int seq, const DX& dx, const DWpe& dwpe) {
  const int batch = static_cast<int>(dx.extent(0)) / seq;
  for_each_element(exec, "kgpt::position_embedding::backward", static_cast<std::size_t>(seq), dx.extent(1),
                   KOKKOS_LAMBDA(const std::size_t t, const std::size_t j) {
                     T sum = 0;
                     for (int b = 0; b < batch; ++b) sum += T(dx(b * seq + t, j));
                     dwpe(t, j) += sum;
                   });
}

}  // namespace

// The workspace of the GPU's table gradient (empty on the host), sized once for max_rows rows of
// `width` channels: the counting sort's arrays and the partial sums of the segments.
template <class T>
struct EmbeddingSortSpace {
  static constexpr int rows_per_block = 256;   // of the sort's per-block counts
  static constexpr int rows_per_segment = 32;  // rows one team adds for a frequent token
  // Slots of segment partials that N rows can need: segments of large tokens, plus the gaps the keys leave.
  static int slots(std::size_t rows) { return static_cast<int>(2 * ((rows + rows_per_segment - 1) / rows_per_segment) + 1); }
  EmbeddingSortSpace() = default;
  EmbeddingSortSpace(std::size_t max_rows, std::size_t vocab, std::size_t width)
      : order("kgpt::embedding::order", max_rows),
        offsets("kgpt::embedding::offsets", (max_rows + rows_per_block - 1) / rows_per_block * vocab),
        start("kgpt::embedding::start", vocab + 1),
        key("kgpt::embedding::segment_key", vocab),
        partials("kgpt::embedding::segment_partials", static_cast<std::size_t>(slots(max_rows)) * width) {}
  // Whether it was made for at least N rows of `width` channels over `vocab` tokens.
  bool holds(std::size_t rows, std::size_t vocab, std::size_t width) const {
    return order.extent(0) >= rows && start.extent(0) >= vocab + 1 && key.extent(0) >= vocab &&
           offsets.extent(0) >= (rows + rows_per_block - 1) / rows_per_block * vocab &&
           partials.extent(0) >= static_cast<std::size_t>(slots(rows)) * width;
  }
  // What the constructor allocates.
  static std::size_t bytes(std::size_t max_rows, std::size_t vocab, std::size_t width) {
    const std::size_t ints = max_rows + (max_rows + rows_per_block - 1) / rows_per_block * vocab + (vocab + 1) + vocab;
    return ints * sizeof(int) + static_cast<std::size_t>(slots(max_rows)) * width * sizeof(T);
  }
  Kokkos::View<int*, MemSpace> order;    // rows in (token, row) order
  Kokkos::View<int*, MemSpace> offsets;  // per (token, block): counts, then where the block's rows go
  Kokkos::View<int*, MemSpace> start;    // first position of each token; start(V) = N
  Kokkos::View<int*, MemSpace> key;      // first partial slot of each token's segments
  Kokkos::View<T*, MemSpace> partials;   // (slots, width): each segment's sum per channel
};

// The table gradient's implementations differ by backend; backend::Current picks one.
template <class Backend>
struct EmbeddingBackward;

}  // namespace kgpt::model::ops

#include "model/ops/embedding_backward_cuda.hpp"
#include "model/ops/embedding_backward_host.hpp"

namespace kgpt::model::ops {

template <class T, class DOut, class DTable>
void embedding_backward(const ExecSpace& exec, const ConstTokenMatrix& tokens, const DOut& dout, const DTable& dtable,
                        const EmbeddingSortSpace<T>& space) {
  EmbeddingBackward<backend::Current>::template run<T>(exec, tokens, dout, dtable, space);
}

}  // namespace kgpt::model::ops
