#pragma once
// The one GEMM entry point of kgpt: C = alpha * op(A) * op(B) + beta * C on LayoutRight 2-D
// Views (subviews that keep LayoutRight included). On the host it reaches OpenBLAS sgemm/dgemm
// through Kokkos Kernels; keeping every operand LayoutRight avoids KK's slow native fallback. On
// CUDA, fp32 goes through Kokkos Kernels to cuBLAS sgemm (the reference path); with the bf16 GEMM
// precision, float products go to cuBLAS directly with bf16 inputs and fp32 accumulation and output
// (Kokkos Kernels has no cuBLAS path for bf16). gemm_batched runs many equal products in one call
// (cuBLAS strided batched on CUDA, a loop of gemm on the host).

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#ifdef KOKKOS_ENABLE_CUDA
#include "model/cublas_gemm.hpp"
#endif

namespace kgpt::model {

enum class Op { none, transpose };

// What the tensor cores are fed: fp32 everywhere (the reference), or bf16 inputs with fp32
// accumulation on CUDA. Host builds always run fp32.
enum class GemmPrecision { fp32, bf16 };

namespace detail {
inline GemmPrecision& requested_gemm_precision() {
  static GemmPrecision precision = GemmPrecision::fp32;
  return precision;
}

template <class T>
constexpr bool uses_cublas() {
#ifdef KOKKOS_ENABLE_CUDA
  return std::is_same<ExecSpace, Kokkos::Cuda>::value && std::is_same<T, float>::value;
#else
  return false;
#endif
}
}  // namespace detail

// Sets the precision of every later GEMM of this process (the trainer and bench set it from the deck).
inline void set_gemm_precision(GemmPrecision precision) { detail::requested_gemm_precision() = precision; }

// The same from the deck's train.gemm_precision ("fp32" or "bf16"; the schema admits no other).
inline void set_gemm_precision(const std::string& name) {
  set_gemm_precision(name == "bf16" ? GemmPrecision::bf16 : GemmPrecision::fp32);
}

// The precision float GEMMs actually run in: bf16 only when asked for and the device is CUDA.
inline GemmPrecision gemm_precision() {
  return detail::uses_cublas<float>() ? detail::requested_gemm_precision() : GemmPrecision::fp32;
}

inline const char* gemm_precision_name() { return gemm_precision() == GemmPrecision::bf16 ? "bf16" : "fp32"; }

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
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (detail::uses_cublas<typename CView::non_const_value_type>()) {
    if (gemm_precision() == GemmPrecision::bf16) {
      const auto operand = [](const auto& x, Op op) {
        return cublas::Operand{x.data(), static_cast<std::int64_t>(x.extent(0)), static_cast<std::int64_t>(x.extent(1)),
                               static_cast<std::int64_t>(x.stride(0)), 0, op == Op::transpose};
      };
      cublas::gemm(exec.cuda_stream(), true, static_cast<std::int64_t>(m), static_cast<std::int64_t>(n),
                   static_cast<std::int64_t>(k), alpha, operand(a, op_a), operand(b, op_b), beta,
                   cublas::Output{c.data(), static_cast<std::int64_t>(c.stride(0)), 0}, 1);
      return;
    }
  }
#endif
  compat::blas_gemm(exec, op_a == Op::none ? "N" : "T", op_b == Op::none ? "N" : "T", alpha, a, b, beta, c);
}

// `count` contiguous row-major matrices of rows x cols; item i starts at data + i * stride (elements).
template <class T>
struct Strided {
  T* data;
  std::size_t rows, cols, stride;
};

// C_i = alpha op(A_i) op(B_i) + beta C_i for i < count. Shapes as in gemm; every item must fit its stride.
template <class T>
void gemm_batched(const ExecSpace& exec, Op op_a, Op op_b, T alpha, const Strided<const T>& a,
                  const Strided<const T>& b, T beta, const Strided<T>& c, std::size_t count) {
  const std::size_t m = op_a == Op::none ? a.rows : a.cols, k = op_a == Op::none ? a.cols : a.rows;
  const std::size_t kb = op_b == Op::none ? b.rows : b.cols, n = op_b == Op::none ? b.cols : b.rows;
  if (k != kb || c.rows != m || c.cols != n) {
    throw Error(ExitCode::failure, "kgpt::model::gemm_batched: shapes do not match: op(A) " + std::to_string(m) + "x" +
                                       std::to_string(k) + ", op(B) " + std::to_string(kb) + "x" + std::to_string(n) +
                                       ", C " + std::to_string(c.rows) + "x" + std::to_string(c.cols));
  }
  if (count == 0 || m == 0 || n == 0) return;
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (detail::uses_cublas<T>()) {
    if (k > 0) {
      const auto operand = [](const Strided<const T>& x, Op op) {
        return cublas::Operand{x.data, static_cast<std::int64_t>(x.rows), static_cast<std::int64_t>(x.cols),
                               static_cast<std::int64_t>(x.cols), static_cast<std::int64_t>(x.stride),
                               op == Op::transpose};
      };
      cublas::gemm(exec.cuda_stream(), gemm_precision() == GemmPrecision::bf16, static_cast<std::int64_t>(m),
                   static_cast<std::int64_t>(n), static_cast<std::int64_t>(k), alpha, operand(a, op_a),
                   operand(b, op_b), beta,
                   cublas::Output{c.data, static_cast<std::int64_t>(c.cols), static_cast<std::int64_t>(c.stride)},
                   static_cast<std::int64_t>(count));
      return;
    }
  }
#endif
  for (std::size_t i = 0; i < count; ++i) {
    gemm(exec, op_a, op_b, alpha, ConstMatrix<T>(a.data + i * a.stride, a.rows, a.cols),
         ConstMatrix<T>(b.data + i * b.stride, b.rows, b.cols), beta, Matrix<T>(c.data + i * c.stride, c.rows, c.cols));
  }
}

}  // namespace kgpt::model
