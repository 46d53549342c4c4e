#pragma once
// The one GEMM entry point of kgpt: C = alpha * op(A) * op(B) + beta * C on LayoutRight 2-D
// Views (subviews that keep LayoutRight included), and gemm_batched for many equal products at a
// fixed stride. The shapes are checked here; the products run in the backend's implementation
// (core/backend.hpp): gemm_host.hpp (Kokkos Kernels, OpenBLAS on the host) or gemm_cuda.hpp
// (cuBLAS; with the bf16 precision, float products take bf16 inputs with fp32 accumulation and
// output on the tensor cores).

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "model/gemm_types.hpp"
#include "model/gemm_host.hpp"
#if KGPT_BACKEND_CUDA
#include "model/gemm_cuda.hpp"
#endif

namespace kgpt::model {

namespace detail {
[[noreturn]] inline void shape_mismatch(const char* who, std::size_t m, std::size_t k, std::size_t kb, std::size_t n,
                                        std::size_t c_rows, std::size_t c_cols) {
  throw Error(ExitCode::failure, std::string(who) + ": shapes do not match: op(A) " + std::to_string(m) + "x" +
                                     std::to_string(k) + ", op(B) " + std::to_string(kb) + "x" + std::to_string(n) +
                                     ", C " + std::to_string(c_rows) + "x" + std::to_string(c_cols));
}
}  // namespace detail

// Shapes: op(A) is (M, K), op(B) is (K, N), C is (M, N). Mismatched shapes throw Error.
template <class AView, class BView, class CView>
void gemm(const ExecSpace& exec, Op op_a, Op op_b, typename CView::const_value_type alpha, const AView& a,
          const BView& b, typename CView::const_value_type beta, const CView& c, GemmPrecision precision) {
  static_assert(std::is_same<typename AView::array_layout, Kokkos::LayoutRight>::value &&
                    std::is_same<typename BView::array_layout, Kokkos::LayoutRight>::value &&
                    std::is_same<typename CView::array_layout, Kokkos::LayoutRight>::value,
                "kgpt::model::gemm takes LayoutRight operands only");
  const std::size_t m = op_a == Op::none ? a.extent(0) : a.extent(1);
  const std::size_t k = op_a == Op::none ? a.extent(1) : a.extent(0);
  const std::size_t kb = op_b == Op::none ? b.extent(0) : b.extent(1);
  const std::size_t n = op_b == Op::none ? b.extent(1) : b.extent(0);
  if (k != kb || c.extent(0) != m || c.extent(1) != n) {
    detail::shape_mismatch("kgpt::model::gemm", m, k, kb, n, c.extent(0), c.extent(1));
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS leaves C untouched when K = 0 only if beta = 1; scale it here for every beta.
    Kokkos::parallel_for(
        "kgpt::model::gemm_scale", Kokkos::RangePolicy<ExecSpace>(exec, 0, m), KOKKOS_LAMBDA(const std::size_t i) {
          for (std::size_t j = 0; j < n; ++j) c(i, j) = beta == 0 ? 0 : beta * c(i, j);
        });
    return;
  }
  GemmBackend<backend::Current>::gemm(exec, op_a, op_b, alpha, a, b, beta, c, precision);
}

// C_i = alpha op(A_i) op(B_i) + beta C_i for i < count. Shapes as in gemm; every item must fit its stride.
template <class T>
void gemm_batched(const ExecSpace& exec, Op op_a, Op op_b, T alpha, const Strided<const T>& a,
                  const Strided<const T>& b, T beta, const Strided<T>& c, std::size_t count,
                  GemmPrecision precision) {
  const std::size_t m = op_a == Op::none ? a.rows : a.cols, k = op_a == Op::none ? a.cols : a.rows;
  const std::size_t kb = op_b == Op::none ? b.rows : b.cols, n = op_b == Op::none ? b.cols : b.rows;
  if (k != kb || c.rows != m || c.cols != n) detail::shape_mismatch("kgpt::model::gemm_batched", m, k, kb, n, c.rows, c.cols);
  if (count == 0 || m == 0 || n == 0) return;
  GemmBackend<backend::Current>::gemm_batched(exec, op_a, op_b, alpha, a, b, beta, c, count, precision);
}

}  // namespace kgpt::model
