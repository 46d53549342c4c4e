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

using TokenMatrix = Kokkos::View<int**, Layout, MemSpace>;  // (B, T) token ids
using ConstTokenMatrix = Kokkos::View<const int**, Layout, MemSpace>;

}  // namespace kgpt
