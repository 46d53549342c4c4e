#pragma once
// GEMMs on CUDA: float products go to cuBLAS directly (strided batched sgemm, or with the bf16
// precision cublasGemmStridedBatchedEx on bf16 copies of the inputs with fp32 accumulation and fp32
// output: Kokkos Kernels has no cuBLAS path for bf16); double products take the host
// implementation's route through Kokkos Kernels, which reaches cuBLAS dgemm.
// Row-major operands as kgpt stores them: C (m x n, leading dimension ldc) = alpha op(A) op(B) +
// beta C, every pointer in device memory, enqueued on the execution space's stream.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "model/gemm_types.hpp"
#include "model/gemm_host.hpp"

namespace kgpt::model {

namespace cublas {

struct Operand {
  const float* data;
  std::int64_t rows, cols, ld;  // as stored (row-major), before op
  std::int64_t stride;          // elements between batch items (0 for one product)
  bool transpose;
};

struct Output {
  float* data;
  std::int64_t ld, stride;
};

// C = alpha op(A) op(B) + beta C for `count` items; m, n, k are op(A) rows, op(B) cols, op(A) cols.
void gemm(cudaStream_t stream, bool bf16, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const Operand& a, const Operand& b, float beta, const Output& c, std::int64_t count);

}  // namespace cublas

template <>
struct GemmBackend<backend::Cuda> {
  template <class AView, class BView, class CView>
  static void gemm(const ExecSpace& exec, Op op_a, Op op_b, typename CView::const_value_type alpha, const AView& a,
                   const BView& b, typename CView::const_value_type beta, const CView& c, GemmPrecision precision) {
    if constexpr (std::is_same<typename CView::non_const_value_type, float>::value) {
      const auto operand = [](const auto& x, Op op) {
        return cublas::Operand{x.data(), static_cast<std::int64_t>(x.extent(0)), static_cast<std::int64_t>(x.extent(1)),
                               static_cast<std::int64_t>(x.stride(0)), 0, op == Op::transpose};
      };
      const std::int64_t m = static_cast<std::int64_t>(c.extent(0)), n = static_cast<std::int64_t>(c.extent(1));
      const std::int64_t k = static_cast<std::int64_t>(op_a == Op::none ? a.extent(1) : a.extent(0));
      cublas::gemm(exec.cuda_stream(), precision == GemmPrecision::bf16, m, n, k, alpha, operand(a, op_a),
                   operand(b, op_b), beta, cublas::Output{c.data(), static_cast<std::int64_t>(c.stride(0)), 0}, 1);
    } else {
      GemmBackend<backend::Host>::gemm(exec, op_a, op_b, alpha, a, b, beta, c, precision);
    }
  }

  template <class T>
  static void gemm_batched(const ExecSpace& exec, Op op_a, Op op_b, T alpha, const Strided<const T>& a,
                           const Strided<const T>& b, T beta, const Strided<T>& c, std::size_t count,
                           GemmPrecision precision) {
    const std::size_t k = op_a == Op::none ? a.cols : a.rows;
    if constexpr (std::is_same<T, float>::value) {
      if (k > 0) {
        const auto operand = [](const Strided<const T>& x, Op op) {
          return cublas::Operand{x.data, static_cast<std::int64_t>(x.rows), static_cast<std::int64_t>(x.cols),
                                 static_cast<std::int64_t>(x.cols), static_cast<std::int64_t>(x.stride),
                                 op == Op::transpose};
        };
        cublas::gemm(exec.cuda_stream(), precision == GemmPrecision::bf16, static_cast<std::int64_t>(c.rows),
                     static_cast<std::int64_t>(c.cols), static_cast<std::int64_t>(k), alpha, operand(a, op_a),
                     operand(b, op_b), beta,
                     cublas::Output{c.data, static_cast<std::int64_t>(c.cols), static_cast<std::int64_t>(c.stride)},
                     static_cast<std::int64_t>(count));
        return;
      }
    }
    GemmBackend<backend::Host>::gemm_batched(exec, op_a, op_b, alpha, a, b, beta, c, count, precision);
  }
};

}  // namespace kgpt::model
