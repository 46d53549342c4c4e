#pragma once
// The token embedding's table gradient on the host: one pass per channel over every row in order.
//   dtable(v, c) += sum of dout(n, c) over the n with token(n) = v

#include "core/backend.hpp"
#include "core/views.hpp"
#include "core/kernel.hpp"

namespace kgpt::model::ops {

template <class T>
struct EmbeddingSortSpace;

namespace {  // kernels: internal linkage, see core/kernel.hpp

// One thread per channel, every row in order: the host's way.
template <class T, class DOut, class DTable>
void embedding_backward_by_channel(const ExecSpace& exec, const ConstTokenMatrix& tokens, const DOut& dout,
                                   const DTable& dtable) {
  const int seq = static_cast<int>(tokens.extent(1));
  const int n = static_cast<int>(dout.extent(0)), c = static_cast<int>(dout.extent(1));
  kgpt::parallel_for(
      "kgpt::embedding::backward", Kokkos::RangePolicy<ExecSpace>(exec, 0, c), KOKKOS_LAMBDA(const int j) {
        for (int row = 0; row < n; ++row) dtable(tokens(row / seq, row % seq), j) += T(dout(row, j));
      });
}

}  // namespace

template <class Backend>
struct EmbeddingBackward;

template <>
struct EmbeddingBackward<backend::Host> {
  template <class T, class DOut, class DTable>
  static void run(const ExecSpace& exec, const ConstTokenMatrix& tokens, const DOut& dout, const DTable& dtable,
                  const EmbeddingSortSpace<T>&) {
    embedding_backward_by_channel<T>(exec, tokens, dout, dtable);
  }
};

}  // namespace kgpt::model::ops
