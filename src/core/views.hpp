#pragma once
// Every View alias of kgpt. Device data is LayoutRight in the default execution space's memory
// space (host BLAS and cuBLAS both take LayoutRight operands without copies); inputs are const.
// Shapes are written in comments with the same letters everywhere:
//   B batch (sequences), T sequence length, C d_model, H query heads, KV key/value heads,
//   D head dimension (C / H), V vocabulary, N rows (B * T), F MLP hidden width.

#include <Kokkos_Core.hpp>

namespace kgpt {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using Layout = Kokkos::LayoutRight;

template <class T>
using Vector = Kokkos::View<T*, Layout, MemSpace>;
template <class T>
using Matrix = Kokkos::View<T**, Layout, MemSpace>;
template <class T>
using Tensor3 = Kokkos::View<T***, Layout, MemSpace>;
template <class T>
using Tensor4 = Kokkos::View<T****, Layout, MemSpace>;

template <class T>
using ConstVector = Kokkos::View<const T*, Layout, MemSpace>;
template <class T>
using ConstMatrix = Kokkos::View<const T**, Layout, MemSpace>;
template <class T>
using ConstTensor3 = Kokkos::View<const T***, Layout, MemSpace>;
template <class T>
using ConstTensor4 = Kokkos::View<const T****, Layout, MemSpace>;

// A row-major 2-D array as a kernel captures it: its data and leading dimension, 16 bytes where a
// Kokkos View takes 40 or more, so that kernels reading many arrays stay small enough to be passed
// as a CUDA kernel's argument (core/kernel.hpp). Made from any View whose rows are contiguous.
template <class T>
struct RowView {
  T* data = nullptr;
  std::size_t ld = 0;
  RowView() = default;
  RowView(T* data_, std::size_t ld_) : data(data_), ld(ld_) {}
  template <class View>
  explicit RowView(const View& view) : data(view.data()), ld(view.extent(0) > 1 ? view.stride(0) : view.extent(1)) {}
  KOKKOS_INLINE_FUNCTION T& operator()(std::size_t i, std::size_t j) const { return data[i * ld + j]; }
};

template <class View>
RowView<typename View::value_type> row_view(const View& view) {
  return RowView<typename View::value_type>(view);
}

using TokenMatrix = Kokkos::View<int**, Layout, MemSpace>;  // (B, T) token ids
using ConstTokenMatrix = Kokkos::View<const int**, Layout, MemSpace>;

}  // namespace kgpt
