#pragma once
// GEMMs on the host (and double GEMMs anywhere): Kokkos Kernels' BLAS, which reaches OpenBLAS
// sgemm/dgemm on the host and cuBLAS on CUDA. Keeping every operand LayoutRight avoids Kokkos
// Kernels' slow native fallback. A batch is a loop of GEMMs: on the host one GEMM per item measured
// far faster than batched team GEMMs.

#include "core/kokkos_compat.hpp"
#include "model/gemm_types.hpp"

namespace kgpt::model {

template <>
struct GemmBackend<backend::Host> {
  template <class AView, class BView, class CView>
  static void gemm(const ExecSpace& exec, Op op_a, Op op_b, typename CView::const_value_type alpha, const AView& a,
                   const BView& b, typename CView::const_value_type beta, const CView& c, GemmPrecision) {
    compat::blas_gemm(exec, op_a == Op::none ? "N" : "T", op_b == Op::none ? "N" : "T", alpha, a, b, beta, c);
  }

  template <class T>
  static void gemm_batched(const ExecSpace& exec, Op op_a, Op op_b, T alpha, const Strided<const T>& a,
                           const Strided<const T>& b, T beta, const Strided<T>& c, std::size_t count,
                           GemmPrecision precision) {
    for (std::size_t i = 0; i < count; ++i) {
      model::gemm(exec, op_a, op_b, alpha, ConstMatrix<T>(a.data + i * a.stride, a.rows, a.cols),
                  ConstMatrix<T>(b.data + i * b.stride, b.rows, b.cols), beta,
                  Matrix<T>(c.data + i * c.stride, c.rows, c.cols), precision);
    }
  }
};

}  // namespace kgpt::model
