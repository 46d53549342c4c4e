#pragma once
// The one GEMM entry point of kgpt: C = alpha * op(A) * op(B) + beta * C on LayoutRight 2-D
// Views (subviews that keep LayoutRight included). On the host it reaches OpenBLAS sgemm/dgemm
// through Kokkos Kernels; keeping every operand LayoutRight avoids KK's slow native fallback.

#include <string>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"

namespace kgpt::model {

enum class Op { none, transpose };

// Shapes: op(A) is (M, K), op(B) is (K, N), C is (M, N). Mismatched shapes throw Error.
template <class AView, class BView, class CView>
void gemm(const ExecSpace& exec, Op op_a, Op op_b, typename CView::const_value_type alpha, const AView& a,
          const BView& b, typename CView::const_value_type beta, const CView& c) {
  static_assert(std::is_same<typename AView::array_layout, Kokkos::LayoutRight>::value &&
                    std::is_same<typename BView::array_layout, Kokkos::LayoutRight>::value &&
                    std::is_same<typename CView::array_layout, Kokkos::LayoutRight>::value,
                "kgpt::model::gemm takes LayoutRight operands only");
  const std::size_t m = op_a == Op::none ? a.extent(0) : a.extent(1);
  const std::size_t k = op_a == Op::none ? a.extent(1) : a.extent(0);
  const std::size_t kb = op_b == Op::none ? b.extent(0) : b.extent(1);
  const std::size_t n = op_b == Op::none ? b.extent(1) : b.extent(0);
  if (k != kb || c.extent(0) != m || c.extent(1) != n) {
    throw Error(ExitCode::failure, "kgpt::model::gemm: shapes do not match: op(A) " + std::to_string(m) + "x" +
                                       std::to_string(k) + ", op(B) " + std::to_string(kb) + "x" + std::to_string(n) +
                                       ", C " + std::to_string(c.extent(0)) + "x" + std::to_string(c.extent(1)));
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS leaves C untouched when K = 0 only if beta = 1; scale it here for every beta.
    Kokkos::parallel_for(
        "kgpt::model::gemm_scale", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {m, n}),
        KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) { c(i, j) = beta == 0 ? 0 : beta * c(i, j); });
    return;
  }
  compat::blas_gemm(exec, op_a == Op::none ? "N" : "T", op_b == Op::none ? "N" : "T", alpha, a, b, beta, c);
}

}  // namespace kgpt::model
